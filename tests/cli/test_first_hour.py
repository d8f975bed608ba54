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
    assert len(text.splitlines()) < 300  # each field's sentence whole, wrapped (--help-all: some 1,800 lines)


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
    assert by_flags.objective.config() == by_task_args.objective.config()
    assert by_flags.objective.config()["sanity"] is None and by_flags.objective.config()["components"] == ["qed", "sa"]
    assert task_from_args(parse()).objective.config() != by_flags.objective.config()


def test_a_task_arg_without_equals_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["eval", "task", *EVAL_REQUIRED["task"], "--task-arg", "oops"]) == 2
    assert capsys.readouterr().err.strip() == "divrl eval task: error: --task-arg expects KEY=VALUE, got 'oops'"


def test_portable_model_name(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from divrl.models import READY_MARKER, portable_model_name, resolve_model_name

    prepared = tmp_path / "anywhere" / "gemma"
    prepared.mkdir(parents=True)
    (prepared / "config.json").write_text("{}")
    (prepared / READY_MARKER).write_text(json.dumps({"name": "gemma-3-270m"}))
    assert portable_model_name(str(prepared)) == "embedded:gemma-3-270m"
    snapshot = tmp_path / "hub" / "models--google--gemma-3-4b-it" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert portable_model_name(str(snapshot)) == "google/gemma-3-4b-it"
    plain = tmp_path / "my-model"
    plain.mkdir()
    assert portable_model_name(str(plain)) == str(plain)
    assert portable_model_name("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"
    monkeypatch.setenv("DIVRL_CACHE", str(tmp_path / "cache"))  # the name maps back where it is prepared
    (tmp_path / "cache" / "models").mkdir(parents=True)
    prepared.rename(tmp_path / "cache" / "models" / "gemma-3-270m")
    assert resolve_model_name("embedded:gemma-3-270m") == str(tmp_path / "cache" / "models" / "gemma-3-270m")


def test_every_saved_adapter_has_divrls_card_and_a_portable_base(tiny_qwen3, tmp_path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import shutil

    from trainer_helpers import ToyTask, lora_config, make_config, prompt_dataset
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.methods import papers
    from divrl.models import READY_MARKER
    from divrl.sampling import load_for_sampling

    monkeypatch.setenv("DIVRL_CACHE", str(tmp_path / "cache"))  # the tiny model stands in for a prepared one
    base = tmp_path / "cache" / "models" / "gemma-3-270m"
    shutil.copytree(tiny_qwen3, base)
    (base / READY_MARKER).write_text(json.dumps({"name": "gemma-3-270m"}))
    out = tmp_path / "run"
    trainer = DivRLTrainer(str(base), args=make_config(out, ips=True, max_steps=2, save_strategy="steps", save_steps=1),
                           train_dataset=prompt_dataset(), processing_class=AutoTokenizer.from_pretrained(base),
                           peft_config=lora_config(), task=ToyTask())
    trainer.card_facts = {"command": "divrl train recipe.yaml --ips true"}
    trainer.train()
    trainer.save_model(str(out))
    for folder in (out / "checkpoint-1", out / "checkpoint-2", out):
        card = (folder / "README.md").read_text()
        assert "Model Card for Model ID" not in card and "More Information Needed" not in card
        assert "| methods | IPS-GRPO |" in card and f"| papers | {papers.IPS['reference']} |" in card
        assert "Sinha, Elango and Liu (2026)" in card and "arXiv:2601.21669" in card
        assert "| base model | `embedded:gemma-3-270m` |" in card
        assert "`divrl train recipe.yaml --ips true`" in card
        assert "ToyTask" in card or "toy" in card
        assert "## Metrics at save (last logged training step, step" in card and "| loss |" in card
        assert "One training batch's numbers" in card
        assert 'resolve_model_name("embedded:gemma-3-270m")' in card  # the plain-PEFT hint
        assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == \
            "embedded:gemma-3-270m"
    assert "step 1 of 2" in (out / "checkpoint-1" / "README.md").read_text()
    from peft import PeftModel

    model, _ = load_for_sampling(str(out / "checkpoint-1"))  # divrl resolves the portable name
    assert isinstance(model, PeftModel)


def test_pairwise_diversity_of_texts_stays_in_its_range_and_nearer_the_truth() -> None:
    import random
    from collections import Counter

    import torch

    from divrl.core import hashed_ngram_embedding, mean_pairwise_cosine_distance

    def true_distance(first: str, second: str) -> float:  # 1 - cos of exact trigram counts: in [0, 1]
        a, b = (Counter(t[i:i + 3] for i in range(max(len(t) - 2, 1))) for t in (first, second))
        norm = (sum(v * v for v in a.values()) * sum(v * v for v in b.values())) ** 0.5
        return 1 - sum(a[k] * b[k] for k in a) / norm

    rng = random.Random(0)
    above_one = 0
    for _ in range(300):
        size = rng.randint(2, 8)
        texts = ["".join(rng.choice("abcdefgh (x)") for _ in range(rng.randint(3, 40))) for _ in range(size)]
        embeddings = hashed_ngram_embedding(texts, dim=32)  # few buckets: many collisions
        clamped = mean_pairwise_cosine_distance(embeddings, counts=True)
        raw = mean_pairwise_cosine_distance(embeddings)
        assert 0.0 <= clamped <= 1.0 + 1e-6
        above_one += raw > 1.0
        for i in range(size):  # each pair's clamped estimate is at least as near the exact distance as the raw one
            for j in range(i + 1, size):
                pair, truth = embeddings[[i, j]], true_distance(texts[i], texts[j])
                assert abs(mean_pairwise_cosine_distance(pair, counts=True) - truth) <= \
                    abs(mean_pairwise_cosine_distance(pair) - truth) + 1e-6
    assert above_one > 0  # without the clamp, hashing noise does take it above 1 (what issue 45 saw)
    assert mean_pairwise_cosine_distance(torch.tensor([[1.0, 0.0], [-1.0, 0.0]])) == 2.0  # general vectors: [0, 2]


def test_output_that_is_not_a_terminal_has_no_progress_bar_redraws(tiny_qwen3, tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        env.pop(name, None)
    bare = subprocess.run([sys.executable, "-c", "from tqdm import tqdm; list(tqdm(range(3)))"], env=env,
                          capture_output=True, check=True)  # bytes: text mode would turn \r into \n
    assert b"\r" in bare.stderr  # what a log file got before: tqdm redraws with carriage returns
    command = ["eval", "task", "--task", "countdown", "--task-arg", "instances=4", "--model", str(tiny_qwen3),
               "--samples", "2", "--max-new-tokens", "4", "--limit", "1", "--out", str(tmp_path / "eval")]
    run = subprocess.run([sys.executable, "-c", f"import sys; from divrl.cli import main; sys.exit(main({command!r}))"],
                         env=env, capture_output=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert b"\r" not in run.stdout + run.stderr
    assert b"FutureWarning" not in run.stderr  # the loader's PEFT / transformers deprecations are filtered


def test_the_console_drops_bitsandbytes_cpu_kernel_notice_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    """bitsandbytes logs its CPU-kernel notice only on AVX512-BF16 CPUs, so the record is emitted here directly
    (from a logger without the filter an earlier `divrl` command in this process installed)."""
    import logging

    from divrl import quiet
    from divrl.quiet import CPU_KERNEL_NOTICE, quiet_console

    logger = logging.getLogger(CPU_KERNEL_NOTICE[0])
    notice = "Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you already `pip " \
             "install kernels` and the kernels >= 0.11.1"
    saved = list(logger.filters)
    logger.filters[:] = before = [f for f in saved if f is not quiet._not_the_cpu_kernel_notice]
    try:
        with caplog.at_level(logging.WARNING):
            logger.warning(notice, "No module named 'kernels'")
            assert "gemm_4bit_forward" in caplog.text  # shown before the entry point's setup
            caplog.clear()
            quiet_console()
            quiet_console()  # idempotent: one filter
            logger.warning(notice, "No module named 'kernels'")
            logger.warning("another bitsandbytes warning")
        assert "gemm_4bit_forward" not in caplog.text and "another bitsandbytes warning" in caplog.text
        assert len(logger.filters) == len(before) + 1
    finally:
        logger.filters[:] = saved


def test_trainer_construction_and_training_show_no_upstream_deprecations(tiny_qwen3, tmp_path) -> None:
    import warnings

    from trainer_helpers import ToyTask, lora_config, make_config, prompt_dataset
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.quiet import UPSTREAM_DEPRECATIONS

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = DivRLTrainer(str(tiny_qwen3), args=make_config(tmp_path, max_steps=1), train_dataset=prompt_dataset(),
                               processing_class=AutoTokenizer.from_pretrained(tiny_qwen3), peft_config=lora_config(),
                               task=ToyTask())
        trainer.train()
    shown = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert not [m for m in shown if any(m.startswith(d) for d in UPSTREAM_DEPRECATIONS)], shown


def test_divrl_turns_activation_checkpointing_on_and_off_by_transformers_5s_names(tiny_qwen3, tmp_path) -> None:
    """Fixed at the source, not filtered: DivRLConfig's default and the trainer's own toggle warn of nothing."""
    import warnings

    from transformers import AutoModelForCausalLM

    from divrl import DivRLConfig
    from divrl.trainers.divrl_trainer import activation_checkpointing_off

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        config = DivRLConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
        model = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
        model.activation_checkpointing_enable()
        with activation_checkpointing_off(model, {"use_reentrant": False}):
            assert not model.is_activation_checkpointing
        assert model.is_activation_checkpointing
    assert config.activation_checkpointing and config.gradient_checkpointing  # GRPOConfig's default, kept
    assert not DivRLConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False,
                           activation_checkpointing=False).gradient_checkpointing
    with pytest.warns(FutureWarning, match="`gradient_checkpointing` is deprecated"):  # the user's own old name
        assert not DivRLConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False,
                               gradient_checkpointing=False).activation_checkpointing
