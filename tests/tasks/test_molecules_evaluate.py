"""`evaluate_molecules` with patched generation: known completions give known metrics and files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rdkit import Chem

from divrl.tasks.molecules.evaluate import evaluate_molecules
from divrl.tasks.molecules.rewards import MPO

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
CAFFEINE = "Cn1c(=O)c2c(ncn2C)n(C)c1=O"
COMPLETIONS = [
    f" {ASPIRIN}\nSMILES: CCO",
    "I am not sure.",
    f" {CAFFEINE} (caffeine)",
    " OC(=O)c1ccccc1OC(C)=O",  # aspirin again, another spelling: a cache hit, no oracle call
    "C1CC",
]


class ScriptedSampler:
    """Gives the k-th distinct prompt it sees the completions script[k]; records (prompts, n) per call."""

    def __init__(self, script: list[list[str]]) -> None:
        self.script = script
        self.prompts: list = []
        self.calls: list[tuple[int, int]] = []

    def __call__(self, prompts: list, n: int = 1) -> list[list[str]]:
        self.calls.append((len(prompts), n))
        for prompt in prompts:
            if prompt not in self.prompts:
                self.prompts.append(prompt)
        return [self.script[self.prompts.index(p)][:n] for p in prompts]


def test_known_completions_give_known_metrics(tmp_path: Path) -> None:
    aspirin, caffeine = MPO()(ASPIRIN), MPO()(CAFFEINE)
    assert 0.75 < caffeine < 0.8 < aspirin  # the thresholds below separate the two molecules
    # 5 samples over 2 prompts: the first prompt gets 3, the second 2, scored round-robin (COMPLETIONS order).
    sampler = ScriptedSampler([COMPLETIONS[0::2], COMPLETIONS[1::2]])
    metrics = evaluate_molecules(sampler, 5, prompts=2, reference=[ASPIRIN], taus=(0.75, 0.8), ob_n=2, out_dir=tmp_path)
    assert sampler.calls == [(1, 3), (1, 2)]
    assert len(sampler.prompts) == 2 and all(p.endswith("SMILES:") for p in sampler.prompts)
    assert metrics["samples"] == 5 and metrics["validity"] == pytest.approx(3 / 5)
    assert metrics["uniqueness"] == pytest.approx(2 / 3) and metrics["novelty"] == pytest.approx(1 / 2)
    assert metrics["sample_uniqueness"] == pytest.approx(2 / 5)
    assert metrics["oracle_calls"] == 2
    assert metrics["yield"] == {"0.75": 2, "0.8": 1}
    assert metrics["oracle_burden_2"] == {"0.75": 2, "0.8": None}
    assert metrics["reward"]["mean"] == pytest.approx((2 * aspirin + caffeine) / 5)
    assert metrics["few_shot_copy_fraction"] == 0.0
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [line["completion"] for line in lines] == COMPLETIONS
    canonical = [Chem.CanonSmiles(ASPIRIN), None, Chem.CanonSmiles(CAFFEINE), Chem.CanonSmiles(ASPIRIN), None]
    assert [line["smiles"] for line in lines] == canonical
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_copying_few_shot_examples_is_detected_and_not_novel() -> None:
    def copy_first_example(prompts: list, n: int) -> list[list[str]]:
        return [[p[1]["content"].splitlines()[1].removeprefix("- ")] * n for p in prompts]

    metrics = evaluate_molecules(copy_first_example, 4, style="chat", prompts=4)
    assert metrics["validity"] == 1.0 and metrics["few_shot_copy_fraction"] == 1.0
    assert metrics["novelty"] == 0.0  # the default reference holds the few-shot pool


def test_bad_sampler_or_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="did not return 1 completions for each of 2 prompts"):
        evaluate_molecules(lambda prompts, n: [[]] * len(prompts), 2)
    with pytest.raises(ValueError, match="samples"):
        evaluate_molecules(ScriptedSampler([]), 0)
    never = ScriptedSampler([])
    with pytest.raises(ValueError, match="tau must be"):
        evaluate_molecules(never, 2, taus=(1.5,))
    with pytest.raises(ValueError, match="budget must be"):
        evaluate_molecules(never, 2, budget=0)
    assert never.calls == []  # refused before sampling


class FixedSampler:
    """Stands in for `divrl.sampling.make_sampler(...)`: aspirin for every prompt."""

    has_chat_template = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.config = args[1]

    def __call__(self, prompts: list, n: int = 1) -> list[list[str]]:
        return [[f" {ASPIRIN}"] * n for _ in prompts]


def test_cli_with_patched_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from divrl import sampling
    from divrl.cli import main

    monkeypatch.setattr(sampling, "make_sampler", FixedSampler)
    out = tmp_path / "eval"
    argv = ["eval", "molecules", "--model", "m", "--samples", "6", "--prompts", "3", "--out", str(out), "--ob-n", "1"]
    assert main([*argv, "--tau", "0.5"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["validity"] == 1.0 and metrics["uniqueness"] == pytest.approx(1 / 6)
    assert metrics["oracle_calls"] == 1 and metrics["yield"] == {"0.5": 1} and metrics["oracle_burden_1"] == {"0.5": 1}
    assert metrics["config"]["style"] == "base" and metrics["config"]["model"] == "m"
    assert metrics["config"]["sampling"]["stop"] == ["\nSMILES:"]
    assert main([*argv, "--components", "qed", "logp"]) == 2  # unknown component: clear error, exit code 2
    assert main([*argv[:5], "0", *argv[6:]]) == 2
    assert main([*argv, "--tau", "0.5", "--tau", "0", "--budget", "1"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["yield_1_calls"] == {"0.5": 1, "0.0": 1} and metrics["sample_uniqueness"] == pytest.approx(1 / 6)


class NoModelLoads:
    """Stands in for `divrl.sampling.make_sampler`: records that a model load was attempted and refuses it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.calls += 1
        raise ValueError("model load attempted")


# Option sets that must fail (exit 2, a message, no traceback) before any model load; {file} is an existing file.
BAD_EVAL_INPUTS = {
    "out is a file": (["--out", "{file}"], "is an existing file, not a directory"),
    "out under a file": (["--out", "{file}/eval"], "cannot create the directory"),
    "tau nan": (["--tau", "nan"], "tau must be a finite reward threshold in [0, 1)"),
    "tau inf": (["--tau", "inf"], "tau must be a finite reward threshold in [0, 1)"),
    "tau 1": (["--tau", "0.5", "--tau", "1"], "tau must be a finite reward threshold in [0, 1)"),
    "tau negative": (["--tau", "-0.2"], "tau must be a finite reward threshold in [0, 1)"),
    "budget 0": (["--budget", "0"], "budget must be a positive number of oracle calls"),
    "too many shots": (["--shots", "100000"], "exceeds the"),
    "no samples": (["--samples", "0"], "--samples must be >= 1"),
}


@pytest.mark.parametrize("case", list(BAD_EVAL_INPUTS))
def test_cli_refuses_bad_input_before_loading_the_model(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from divrl import sampling
    from divrl.cli import main

    loader = NoModelLoads()
    monkeypatch.setattr(sampling, "make_sampler", loader)
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("not a directory")
    options, message = BAD_EVAL_INPUTS[case]
    argv = ["eval", "molecules", "--model", str(tmp_path / "no-such-model"), "--samples", "2"]
    argv += ["--out", str(tmp_path / "eval"), *(option.format(file=a_file) for option in options)]  # last wins
    assert main(argv) == 2
    assert loader.calls == 0
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error
    assert a_file.read_text() == "not a directory"


def test_cli_creates_the_output_directory_before_loading_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from divrl import sampling
    from divrl.cli import main

    out = tmp_path / "deep" / "eval"
    seen: list[bool] = []

    def loader(*args: object, **kwargs: object) -> None:
        seen.append(out.is_dir())
        raise ValueError("no such model")

    monkeypatch.setattr(sampling, "make_sampler", loader)
    argv = ["eval", "molecules", "--model", str(tmp_path / "no-such-model"), "--samples", "2", "--out", str(out)]
    assert main(argv) == 2
    assert seen == [True]
    assert "no such model" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_smoke_on_a_tiny_random_model(tmp_path: Path) -> None:
    """A real (random, untrained) model end to end: it writes the outputs, whatever it generates."""
    from divrl.cli import main
    from divrl.testing import build_tiny_model

    model = build_tiny_model("qwen3", tmp_path / "model")
    out = tmp_path / "eval"
    argv = ["eval", "molecules", "--model", str(model), "--samples", "4", "--prompts", "2", "--out", str(out)]
    assert main([*argv, "--max-new-tokens", "8", "--no-progress"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["samples"] == 4 and metrics["config"]["style"] == "chat"  # the tiny tokenizer has a template
    assert len((out / "samples.jsonl").read_text().splitlines()) == 4 and (out / "plot.png").is_file()
