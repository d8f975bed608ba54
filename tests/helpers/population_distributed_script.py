"""Run by test_population_distributed.py under `accelerate launch` with two CPU processes (gloo, DDP).

Trains a two-member population for four steps and writes, per process, which members' weights moved at
each step, the members' AdamW step counts, the population state and all member weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "trainers"))  # test_population_training's trainer

from test_population_training import RecordSteps, population_trainer  # noqa: E402


def main(model: str, out: str) -> None:
    import torch
    from accelerate import PartialState

    state = PartialState()
    recorder = RecordSteps()
    trainer = population_trainer(Path(model), Path(out) / "run", callbacks=[recorder])
    recorder.trainer = trainer
    trainer.train()
    torch.save({
        "processes": state.num_processes,
        "changed": recorder.changed,
        "adam": [[sorted(steps) for steps in member] for member in recorder.adam],
        "population": trainer.population.state_dict()["population"],
        "weights": [p.detach().clone() for p in trainer.population.member_parameters()],
    }, Path(out) / f"rank{state.process_index}.pt")
    trainer.accelerator.wait_for_everyone()  # a rank that tears down while another still saves can deadlock gloo
    trainer.accelerator.end_training()  # destroy the process group: a live gloo thread at exit can abort a rank


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
