"""`divrl toy`: error messages that list the valid choices, the metrics.json schema, the plots."""

import json

import pytest

from divrl.cli import main

CONTROLLER_METRICS = {"token_entropy", "entropy_alpha"}
TABULAR_METRICS = {"l1_to_target", "kl_to_target", "max_outcome_prob", "distinct_outcomes", "outcome_freqs",
                   "pass_at_k", *CONTROLLER_METRICS}
IDEA_METRICS = {"mean_reward", "max_reward", "diversity", "complexity", "outcomes_per_group", *CONTROLLER_METRICS}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run `divrl toy ...`, returning (exit code, stdout, stderr); argparse exits are caught."""
    try:
        code = main(["toy", *argv])
    except SystemExit as exit_:
        code = int(exit_.code)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_unknown_env_lists_valid_envs(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "maze", "--methods", "grpo", "--out", str(tmp_path))
    assert code == 2
    assert "invalid choice: 'maze'" in err and "bandit" in err and "hypergrid" in err and "ideas" in err


def test_unknown_method_lists_components(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "grpo,ppo+ips", "--out", str(tmp_path))
    assert code == 2 and "'ppo'" in err and "grpo, ips, qd, maxent, pop, fkl, js" in err


def test_unknown_option_is_rejected(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "grpo", "--out", str(tmp_path), "--temperature", "1")
    assert code == 2 and "unrecognized arguments: --temperature" in err


def test_option_of_another_env_names_the_valid_ones(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "hypergrid", "--methods", "grpo", "--rewards", "1,2",
                           "--out", str(tmp_path))
    assert code == 2
    assert "--rewards do not apply to --env hypergrid" in err and "--dim, --side, --r0, --r1, --r2" in err
    assert not (tmp_path / "metrics.json").exists()


def test_bad_values_give_clear_errors(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "grpo", "--rewards", "1,2,3",
                           "--initial-logits", "1,0", "--out", str(tmp_path))
    assert code == 2 and "--initial-logits has 2 values but there are 3 arms" in err
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "grpo", "--group-size", "1", "--out", str(tmp_path))
    assert code == 2 and "--group-size must be >= 2, got 1" in err
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "pop", "--population-sigma", "-1", "--out",
                           str(tmp_path))
    assert code == 2 and "--population-sigma must be >= 0, got -1.0" in err
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "ips", "--ips-outcome", "peak", "--out",
                           str(tmp_path))
    assert code == 2 and "--ips-outcome applies to --env ideas only" in err
    code, _, err = run_cli(capsys, "--env", "ideas", "--methods", "ips", "--ips-outcome", "cluster", "--out",
                           str(tmp_path))
    assert code == 2 and "--ips-outcome must be one of peak, grid4, cell" in err
    code, _, err = run_cli(capsys, "--env", "ideas", "--methods", "ips", "--ips-exact", "--out", str(tmp_path))
    assert code == 2 and "--ips-exact needs a tabular environment" in err


def test_unusable_out_is_rejected_before_training(capsys, tmp_path, monkeypatch):
    import divrl.toy.runner

    def no_training(*args, **kwargs):
        raise AssertionError("trained although --out is unusable")

    monkeypatch.setattr(divrl.toy.runner, "train", no_training)
    existing_file = tmp_path / "taken"
    existing_file.write_text("keep me")
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "grpo", "--out", str(existing_file))
    assert code == 2 and f"--out {existing_file} exists and is not a directory" in err
    assert existing_file.read_text() == "keep me"
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "grpo", "--out", str(existing_file / "sub"))
    assert code == 2 and "cannot create the directory" in err


def test_huge_hypergrid_is_refused_quickly(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "hypergrid", "--methods", "grpo", "--dim", "8", "--side", "20",
                           "--out", str(tmp_path))
    assert code == 2 and "20^8" in err and "at most 100000" in err


def check_schema(doc: dict, env: str, methods: list[str], steps: int, metrics: set[str]) -> None:
    assert set(doc) == ({"env", "config", "target", "methods"} if env != "ideas" else {"env", "config", "methods"})
    assert doc["env"] == env and list(doc["methods"]) == methods
    for summary in doc["methods"].values():
        assert set(summary) == {"settings", "final", "curves"}
        assert set(summary["final"]) == set(summary["curves"]) == metrics
        for name, stat in summary["final"].items():
            assert set(stat) == {"mean", "std"}
            assert len(summary["curves"][name]) == steps


def test_bandit_metrics_json_table_and_plots(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "--env", "bandit", "--methods", "grpo,pop+ips+qd", "--seeds", "2", "--steps", "12",
                           "--rewards", "1,1,0", "--group-size", "8", "--out", str(tmp_path), "--quiet")
    assert code == 0
    doc = json.loads((tmp_path / "metrics.json").read_text())
    check_schema(doc, "bandit", ["grpo", "pop+ips+qd"], 12, TABULAR_METRICS)
    assert doc["target"] == [0.5, 0.5, 0.0]
    assert doc["config"]["seeds"] == [42, 142] and doc["config"]["group_size"] == 8
    freqs = doc["methods"]["grpo"]["final"]["outcome_freqs"]
    assert len(freqs["mean"]) == len(freqs["std"]) == 3 and sum(freqs["mean"]) == pytest.approx(1.0)
    assert all(len(step) == 3 for step in doc["methods"]["grpo"]["curves"]["outcome_freqs"])
    assert "pop+ips+qd" in out and "l1_to_target" in out and "target outcome_freqs" in out
    for name in ("curves.png", "outcome_freqs.png", "distribution.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_grid_and_ideas_schemas(capsys, tmp_path):
    code, _, _ = run_cli(capsys, "--env", "multiplicity", "--methods", "ips", "--seeds", "1", "--steps", "3",
                         "--out", str(tmp_path / "m"), "--quiet", "--no-plots")
    assert code == 0
    doc = json.loads((tmp_path / "m" / "metrics.json").read_text())
    check_schema(doc, "multiplicity", ["ips"], 3, TABULAR_METRICS)
    assert len(doc["methods"]["ips"]["final"]["outcome_freqs"]["mean"]) == 2  # [A, B]
    code, _, _ = run_cli(capsys, "--env", "hypergrid", "--methods", "grpo", "--seeds", "1", "--steps", "3",
                         "--dim", "3", "--side", "5", "--out", str(tmp_path / "h"), "--quiet", "--no-plots")
    assert code == 0
    doc = json.loads((tmp_path / "h" / "metrics.json").read_text())
    assert len(doc["target"]) == 5**3 and len(doc["methods"]["grpo"]["final"]["outcome_freqs"]["mean"]) == 8
    code, _, _ = run_cli(capsys, "--env", "ideas", "--methods", "grpo,maxent", "--seeds", "2", "--steps", "3",
                         "--group-size", "4", "--out", str(tmp_path / "i"), "--quiet")
    assert code == 0
    doc = json.loads((tmp_path / "i" / "metrics.json").read_text())
    check_schema(doc, "ideas", ["grpo", "maxent"], 3, IDEA_METRICS)
    assert (tmp_path / "i" / "complexity_hist.png").exists()


def test_old_flags_still_work_with_a_warning(capsys):
    """Toy flags now carry DivRLConfig's names (--count-bonus-coef, ...); the old ones set the same field."""
    import argparse

    from divrl.toy.cli import register, train_config

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    common = ["toy", "--env", "bandit", "--methods", "pop+count", "--out", "unused"]
    old = train_config(parser.parse_args([*common, "--count-coef", "0.7", "--pop-top", "2"]))
    assert "--count-coef is deprecated, use --count-bonus-coef" in capsys.readouterr().err
    new = train_config(parser.parse_args([*common, "--count-bonus-coef", "0.7", "--population-top-m", "2"]))
    assert capsys.readouterr().err == ""
    assert old == new and (new.method_fields["count_bonus_coef"], new.method_fields["population_top_m"]) == (0.7, 2)


def test_method_flags_are_the_registry_fields_and_load_it_only_for_toy() -> None:
    """Every number or text field of a registered method is a `divrl toy` flag with its help; `divrl --help` does
    not import the registry (torch)."""
    import dataclasses
    import subprocess
    import sys

    from trl import TrlParser

    from divrl.methods import REGISTRY
    from divrl.toy.cli import method_flags
    from divrl.trainers.config import DivRLConfig

    flags = method_flags()
    assert {"count_bonus_coef", "qd_beta_new", "novelty_coef", "unlikeliness_beta", "passk", "population_size",
            "maxent_entropy_target", "flowrl_beta", "qd_min_reward"} <= set(flags)
    TrlParser((DivRLConfig,))  # resolves the fields' string annotations in place, as `divrl train` does first
    assert method_flags().keys() == flags.keys()
    assert flags["maxent_entropy_target"][0]("auto") == "auto" and flags["maxent_entropy_target"][0]("1") == 1.0
    assert flags["passk"][0] is int and flags["count_bonus_scope"][0] is str
    assert "ips" not in flags and "qd_dims" not in flags  # switched by --methods; set from the environment
    help_text = dataclasses.fields(REGISTRY["count_bonus"].Config)[0].metadata["help"]
    assert flags["count_bonus_coef"][1].startswith("count_bonus: " + help_text[:40])
    code = ("import sys; from divrl.cli import build_parser; build_parser(); "
            "assert 'divrl.methods' not in sys.modules and 'torch' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_fields_the_toy_never_reads_get_no_flag(capsys, tmp_path):
    """`divrl toy` offers no flag for a TOY_INERT field (its help does not list one, and passing it is an error), and
    an error message names such a field by its name, not by a flag that does not exist."""
    from divrl.toy.cli import method_flags
    from divrl.toy.options import flag
    from divrl.toy.runner import TOY_INERT, option_flag

    assert {"flowrl_log_z_layers", "flowrl_log_z_width", "flowrl_log_z_dropout", "flowrl_log_z_lr"} <= TOY_INERT.keys()
    assert not TOY_INERT.keys() & method_flags().keys()
    assert "maxent_warn_steps" in method_flags()  # honoured on the toy: MaxEnt's own warning
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "--flowrl-beta" in out
    assert [name for name in TOY_INERT if flag(name) + " " in out] == []
    assert all(option_flag(name) == name for name in TOY_INERT)
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "flowrl", "--flowrl-log-z-lr", "1",
                           "--out", str(tmp_path))
    assert code == 2 and "unrecognized arguments: --flowrl-log-z-lr" in err


def test_a_flag_the_methods_label_overrides_is_refused(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--env", "bandit", "--methods", "js,fkl", "--divergence", "js", "--out",
                           str(tmp_path))
    assert code == 2
    assert "--divergence 'js' has no effect with --methods fkl, which sets divergence to 'forward_kl'" in err
    assert not (tmp_path / "metrics.json").exists()


def test_metrics_json_records_each_methods_own_settings(capsys, tmp_path):
    # The labels decide divergence per method: fkl runs forward KL, js runs JS, and the run-wide config claims neither.
    code, _, _ = run_cli(capsys, "--env", "bandit", "--methods", "grpo,fkl,js", "--seeds", "1", "--steps", "2",
                         "--divergence-coef", "0.3", "--out", str(tmp_path), "--quiet", "--no-plots")
    assert code == 0
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert "divergence" not in doc["config"] and "cov_method" not in doc["config"] and "ips" not in doc["config"]
    assert doc["config"]["divergence_coef"] == 0.3
    settings = {method: summary["settings"] for method, summary in doc["methods"].items()}
    assert settings["fkl"]["divergence"] == "forward_kl" and settings["js"]["divergence"] == "js"
    assert settings["fkl"]["divergence_coef"] == settings["js"]["divergence_coef"] == 0.3
    assert "divergence" not in settings["grpo"]
