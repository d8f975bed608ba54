"""GPU-only paths made safe by construction, checked on the CPU: DDP's find_unused_parameters set where it takes
effect, population + vLLM on a quantised base refused, soup SVD computed on rank 0 and broadcast."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_population_training import population_trainer


def test_population_sets_find_unused_parameters_before_the_accelerator_is_built(
        tiny_qwen3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import Trainer

    seen = []
    build = Trainer._build_accelerator_args

    def spy(self, **kwargs):
        seen.append(self.args.ddp_find_unused_parameters)
        return build(self, **kwargs)

    monkeypatch.setattr(Trainer, "_build_accelerator_args", spy)
    trainer = population_trainer(tiny_qwen3, tmp_path)
    assert seen == [True], "DDP's kwargs are built in Trainer.__init__: a later write has no effect"
    assert trainer.accelerator.ddp_handler.find_unused_parameters is True
