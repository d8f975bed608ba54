"""The oracle budget is exact across kills and processes (issue 57): a molecule run on the shipped chemical LM is
killed at each point of a checkpoint save and in the middle of a step's scoring, on one and on two processes, then
resumed; every real oracle call any process made is counted, and together they are the run's history, each molecule
paid once, never more than the budget."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from divrl.tasks.molecules.scoring import read_history

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "helpers" / "oracle_budget_script.py"
BUDGET = 40
KILL_POINTS = ["scoring", "method_state", "optimizer", "after_rotation", "manifest"]


def _launch(processes: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    launcher = [sys.executable] if processes == 1 else [
        str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
        str(ROOT / "accelerate_configs" / "cpu_2proc.yaml")]
    return subprocess.run([*launcher, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def _final_histories(out: Path) -> list[list[tuple[str, float]]]:
    """Every process's oracle-call history in the run's last checkpoint."""
    last = max(out.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    state = torch.load(last / "divrl_state.pt", weights_only=True)
    return [[(s, v) for s, v in task["scorer"]["history"]] for task in state["task"]]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("kill_point", KILL_POINTS)
def test_a_killed_and_resumed_molecule_run_pays_each_call_once_within_the_budget(
        tmp_path: Path, processes: int, kill_point: str) -> None:
    out, calls = tmp_path / "run", tmp_path / "calls.log"
    kill_step = str(BUDGET // 2 if kill_point == "scoring" else 2)  # the 20th call of a process; step 2's save
    killed = _launch(processes, str(out), str(calls), str(BUDGET), kill_point, kill_step)
    assert killed.returncode != 0 and "the kill hook never fired" not in killed.stderr, killed.stderr[-3000:]
    paid_before = calls.read_text().split()
    resumed = _launch(processes, str(out), str(calls), str(BUDGET), "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    paid = calls.read_text().split()
    histories = _final_histories(out)
    assert len(histories) == processes and all(history == histories[0] for history in histories)  # one, shared
    history = [s for s, _ in histories[0]]
    assert len(paid_before) > 0 and len(history) == BUDGET  # the run spent its budget, exactly
    assert len(paid) == len(set(paid)) == BUDGET  # every real call, on every process: each molecule once
    assert set(paid) == set(history)
    assert [(call.smiles, call.score) for call in read_history(out / "oracle_calls.jsonl")] == histories[0]
