"""A molecule run on the shipped chemical LM (`embedded:smiles-clm`) under an oracle budget, checkpointing every step;
every real oracle call any process makes is appended to CALLS_LOG (one SMILES a line, flushed at once), so a test
can count what a run really spent across kills and processes. With a kill point it SIGKILLs itself:
- a checkpoint save point of step KILL_STEP (`method_state`, `optimizer`, `after_rotation`, `manifest`: see
  checkpoint_kill_script.py);
- `scoring`: right after the KILL_STEP-th real oracle call of this process (a kill in the middle of a step's scoring).

    python oracle_budget_script.py OUTPUT_DIR CALLS_LOG BUDGET [KILL_POINT KILL_STEP | resume]
    accelerate launch --config_file accelerate_configs/cpu_2proc.yaml oracle_budget_script.py ...
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from checkpoint_kill_script import _install_kill  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "smiles-clm-cpu" / "molecules" / "grpo.yaml"
SETTINGS = ["--max_steps", "12", "--save_steps", "1", "--save_total_limit", "2", "--num_generations", "8",
            "--per_device_train_batch_size", "8", "--max_completion_length", "60", "--logging_steps", "1"]


def _log_oracle_calls(log: Path, kill_after: int | None) -> None:
    """Append every real oracle call to `log`; SIGKILL this process after its `kill_after`-th one."""
    from divrl.tasks.molecules.scoring import CachedScorer, OracleCall

    call_oracle = CachedScorer._call_oracle
    made = 0

    def logged(self: CachedScorer, smiles: list[str]) -> Iterator[OracleCall]:
        nonlocal made
        with log.open("a", encoding="utf-8") as handle:
            for call in call_oracle(self, smiles):
                handle.write(call.smiles + "\n")
                handle.flush()
                made += 1
                yield call
                if made == kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)

    CachedScorer._call_oracle = logged


def main(out: str, log: str, budget: str, *kill: str) -> int:
    from divrl.train import main as train

    resume = kill == ("resume",)
    point, step = (kill[0], int(kill[1])) if kill and not resume else (None, 0)
    if point not in (None, "scoring"):
        _install_kill(point, step)
    _log_oracle_calls(Path(log), step if point == "scoring" else None)
    return train(["--config", str(RECIPE), "--output_dir", out, "--task_arg", f"oracle_budget={budget}", *SETTINGS,
                  *(["--resume_from_checkpoint", "true"] if resume else [])])


if __name__ == "__main__":
    code = main(*sys.argv[1:])
    if len(sys.argv) > 5:
        raise SystemExit("the run finished: the kill hook never fired")
    raise SystemExit(code)
