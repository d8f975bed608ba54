"""`console_log: compact`: one line per training step on the console, every metric in metrics.jsonl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from trainer_helpers import ToyTask, lora_config, make_config, prompt_dataset

from divrl.trainers.console_log import compact_line


def test_compact_line_shows_the_columns_it_has_and_dashes_for_the_rest() -> None:
    line = compact_line({"divrl/primary_reward": 0.4375, "entropy": 1.23456, "loss": 0.1}, 3, 8, 12.34)
    assert line == "step 3/8  validity 0.438  distinct valid/group -  entropy 1.23  12.3 s"
    assert "validity -" in compact_line({"divrl/primary_reward": float("nan")}, 1, 2, 0.0)


def test_unknown_console_log_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="console_log"):
        make_config(tmp_path, console_log="quiet")


def test_compact_training_prints_a_line_per_step_and_logs_everything(
    tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer

    trainer = DivRLTrainer(
        str(tiny_qwen3), args=make_config(tmp_path, console_log="compact", disable_tqdm=False),
        train_dataset=prompt_dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_qwen3),
        peft_config=lora_config(), task=ToyTask(),
    )
    trainer.train()
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [s.split("  ")[0] for s in steps] == ["step 1/2", "step 2/2"]
    line = re.compile(r"validity [0-9.]+  distinct valid/group [0-9.]+  entropy [0-9.]+  [0-9.]+ s$")
    assert all(line.search(s) for s in steps)
    assert "{'loss'" not in out and "'learning_rate'" not in out  # transformers' raw dict is not printed
    assert "done: 2 steps in" in out
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    training = [entry for entry in logged if "loss" in entry]
    assert [entry["step"] for entry in training] == [1, 2]
    assert {"learning_rate", "grad_norm", "entropy", "divrl/primary_reward"} <= training[0].keys()
    history = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry.keys() for entry in training] == [entry.keys() for entry in history]  # every metric, as logged
    assert [entry["learning_rate"] for entry in training] == [entry["learning_rate"] for entry in history]


@pytest.mark.parametrize(("max_steps", "logging_steps", "printed"), [
    (2, 10, [1, 2]),  # a run no longer than logging_steps: every step (issue 45: it printed only its summary)
    (4, 3, [1, 3, 4]),  # else the logging steps, and the first and the last always
])
def test_compact_console_prints_the_first_and_last_steps_and_every_step_of_a_short_run(
    tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], max_steps: int, logging_steps: int,
    printed: list[int],
) -> None:
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer

    trainer = DivRLTrainer(
        str(tiny_qwen3), args=make_config(tmp_path, console_log="compact", max_steps=max_steps,
                                          logging_steps=logging_steps),
        train_dataset=prompt_dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_qwen3),
        peft_config=lora_config(), task=ToyTask(),
    )
    trainer.train()
    steps = [line.split("  ")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert steps == [f"step {step}/{max_steps}" for step in printed]
