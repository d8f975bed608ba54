"""Issue 45, a newcomer's first hour: discoverable settings and one way to pass a task's settings on every verb."""

from __future__ import annotations

import dataclasses

import pytest

from divrl.cli import EVAL_COMMANDS, build_parser
from divrl.cli import main as cli_main


def test_train_help_lists_every_method_field_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    from divrl.methods import REGISTRY

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["train", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for method in REGISTRY.values():
        assert f"on with --{method.switch};" in text, method.name
        for spec in dataclasses.fields(method.Config):
            assert f"--{spec.name} " in text, spec.name
    ips_epsilon = next(line for line in text.splitlines() if "--ips_epsilon " in line)
    assert "0.001" in ips_epsilon and "Probability floor" in ips_epsilon
    assert "--task_arg" in text and "--console_log" in text  # the task's and divrl's own fields
    assert "--help-all" in text and "--learning_rate " not in text  # TRL's fields are behind --help-all
    assert len(text.splitlines()) < 200


def test_help_after_the_recipe_is_the_same_short_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["train", "recipes/embedded-cpu/hypospace-boolean/ips.yaml", "--help"]) == 0
    assert "--ips_epsilon " in capsys.readouterr().out


def test_list_methods_names_each_methods_paper(capsys: pytest.CaptureFixture[str]) -> None:
    from divrl.methods import REGISTRY, papers

    assert cli_main(["methods"]) == 0
    text = capsys.readouterr().out
    for paper in (papers.IPS, papers.DPH_RL, papers.ENTROPY_MECHANISM, papers.EXECUTION_REWARDS):
        assert paper["title"] in text
    assert "arXiv:2509.07430" in text  # DPH-RL's id
    assert all(f"[{method.name};" in text for method in REGISTRY.values())
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--list-methods"])
    assert capsys.readouterr().out.strip() == text.strip()


# The required options of each `divrl eval` verb, without --task-arg.
EVAL_REQUIRED = {
    "recovery": ["--task", "hypospace-boolean", "--model", "m", "--out", "o"],
    "molecules": ["--model", "m", "--samples", "4", "--out", "o"],
    "task": ["--task", "countdown", "--model", "m", "--out", "o"],
}


@pytest.mark.parametrize("verb", sorted(EVAL_COMMANDS))
@pytest.mark.parametrize("spelling", ["--task-arg", "--task_arg"])
def test_every_eval_verb_takes_repeated_task_args(verb: str, spelling: str) -> None:
    args = build_parser().parse_args(["eval", verb, *EVAL_REQUIRED[verb], spelling, "a=1", spelling, "b=x"])
    assert args.task_arg == ["a=1", "b=x"]


def test_recovery_task_args_and_their_flag_aliases_build_the_same_task() -> None:
    from divrl.tasks.hypospace.cli import task_from_args

    parse = lambda *extra: build_parser().parse_args(["eval", "recovery", *EVAL_REQUIRED["recovery"], *extra])  # noqa: E731
    by_flags = task_from_args("hypospace-boolean", parse("--operators", "basic", "--max-depth", "1"))
    by_task_args = task_from_args("hypospace-boolean", parse("--task-arg", "operators=basic", "--task-arg",
                                                             "max_depth=1"))
    assert by_flags.params == by_task_args.params == {"operators": "basic", "max_depth": 1}
    mixed = task_from_args("hypospace-boolean", parse("--operators", "basic", "--task-arg", "max_depth=1"))
    assert mixed.params == by_flags.params
    with pytest.raises(ValueError, match="'max_depth' is given twice with different values: 2 .* and 1"):
        task_from_args("hypospace-boolean", parse("--max-depth", "2", "--task-arg", "max_depth=1"))
    with pytest.raises(ValueError, match="bad parameters"):
        task_from_args("hypospace-boolean", parse("--task-arg", "colour=red"))


def test_molecule_task_args_and_their_flag_aliases_build_the_same_task() -> None:
    pytest.importorskip("rdkit")
    from divrl.tasks.molecules.cli import task_from_args

    parse = lambda *extra: build_parser().parse_args(["eval", "molecules", *EVAL_REQUIRED["molecules"], *extra])  # noqa: E731
    by_flags = task_from_args(parse("--components", "qed", "sa", "--hbd-threshold", "2", "--no-sanity-gate"))
    by_task_args = task_from_args(parse("--task-arg", "components=[qed, sa]", "--task-arg", "hbd_threshold=2",
                                        "--task-arg", "sanity=false"))
    assert by_flags.mpo.config() == by_task_args.mpo.config()
    assert by_flags.mpo.config()["sanity"] is None and by_flags.mpo.config()["components"] == ["qed", "sa"]
    assert task_from_args(parse()).mpo.config() != by_flags.mpo.config()


def test_a_task_arg_without_equals_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["eval", "task", *EVAL_REQUIRED["task"], "--task-arg", "oops"]) == 2
    assert capsys.readouterr().err.strip() == "divrl eval task: error: --task-arg expects KEY=VALUE, got 'oops'"
