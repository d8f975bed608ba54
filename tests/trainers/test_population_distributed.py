"""Two real DDP processes: members still train in turn (inactive members are unused parameters whose
gradients stay None), and every process ends with the same population and the same member weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_processes_train_the_same_population(tiny_qwen3: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
               str(ROOT / "accelerate_configs" / "cpu_2proc.yaml"),
               str(ROOT / "tests" / "helpers" / "population_distributed_script.py"), str(tiny_qwen3), str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]

    ranks = [torch.load(tmp_path / f"rank{i}.pt", weights_only=True) for i in range(2)]
    for rank in ranks:
        assert rank["processes"] == 2
        assert rank["changed"] == [["default"], ["member_1"], ["default"], ["member_1"]]
        assert rank["adam"] == [[[1], []], [[1], [1]], [[2], [1]], [[2], [2]]]
        assert rank["population"]["soups"] == 1
    assert ranks[0]["population"] == ranks[1]["population"]
    assert all(a.equal(b) for a, b in zip(ranks[0]["weights"], ranks[1]["weights"], strict=True))
