"""Two real processes (`accelerate launch --num_processes 2 --cpu`) give the same scaled rewards as one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "helpers" / "distributed_script.py"


def _run(command: list[str], out: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_processes_match_one(tiny_qwen3: Path, tmp_path: Path) -> None:
    single = _run([sys.executable, str(SCRIPT), str(tiny_qwen3), str(tmp_path / "one.json")], tmp_path / "one.json")
    accelerate = Path(sys.executable).with_name("accelerate")
    double = _run([str(accelerate), "launch", "--config_file", str(ROOT / "accelerate_configs" / "cpu_2proc.yaml"),
                   str(SCRIPT), str(tiny_qwen3), str(tmp_path / "two.json")], tmp_path / "two.json")
    assert (single["processes"], double["processes"]) == (1, 2)
    for one, two in zip(single["steps"], double["steps"], strict=True):
        assert one["completion"] == two["completion"]
        assert one["prompt"] == two["prompt"]
        assert one["rewards"].keys() == two["rewards"].keys() == {"distinct_chars_reward", "divrl_bonus"}
        for name in one["rewards"]:
            assert one["rewards"][name] == pytest.approx(two["rewards"][name], abs=1e-6)
        assert one["advantages"] == pytest.approx(two["advantages"], abs=1e-5)
        # Each process trained on its own slice of the global advantages: together, exactly the 1-process rows.
        assert [c for c, _ in one["trained_on"]] == [c for c, _ in two["trained_on"]]
        assert [a for _, a in one["trained_on"]] == pytest.approx([a for _, a in two["trained_on"]], abs=1e-5)
        assert len(one["trained_on"]) == len(one["completion"])
    first = single["steps"][0]["rewards"]["distinct_chars_reward"]
    assert first[:2] == [2.0, 2.0]  # "aa" twice in group 1: p_hat = 1/2, reward 1 x 2 (IPS really applied)
    assert single["archives"] == double["archives"]
    torch.testing.assert_close(torch.tensor(single["novelty_memory"]), torch.tensor(double["novelty_memory"]))
