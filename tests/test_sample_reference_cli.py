"""`divrl sample-reference` writes a rehearsal set the trainer can read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_cli_writes_a_rehearsal_set(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.cli import main
    from divrl.trainers.rehearsal import META_FILE, RehearsalSet

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "solve 2 + 3"}\n\n{"prompt": [{"role": "user", "content": "hi"}]}\n')
    out = tmp_path / "rehearsal"
    code = main(["sample-reference", "--model", str(tiny_qwen3), "--prompts", str(prompts), "--out", str(out),
                 "--num-samples", "3", "--max-new-tokens", "5", "--temperature", "0.9", "--quantize", "none"])
    assert code == 0
    meta = json.loads((out / META_FILE).read_text())
    assert (meta["temperature"], meta["num_prompts"], meta["num_samples"]) == (0.9, 2, 3)
    rehearsal = RehearsalSet(out, temperature=0.9)
    assert len(rehearsal) == 6
    batch = rehearsal.batch(range(6), pad_token_id=0)
    lengths = batch["completion_mask"].sum(dim=1)
    assert bool(((lengths >= 1) & (lengths <= 5)).all())
    assert bool((batch["ref_logps"][batch["completion_mask"].bool()] < 0).all())  # real log-probs
    assert bool((batch["ref_logps"][~batch["completion_mask"].bool()] == 0).all())  # padding


def test_bad_prompts_file_is_reported(tmp_path: Path) -> None:
    from divrl.trainers.sample_reference_cli import read_prompts

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_prompts(bad, "prompt")
    with pytest.raises(ValueError, match="expected an object with a 'question' field"):
        read_prompts(_write(tmp_path, "{\"prompt\": \"x\"}\n"), "question")
    with pytest.raises(ValueError, match="does not exist"):
        read_prompts(tmp_path / "missing.jsonl", "prompt")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    return path
