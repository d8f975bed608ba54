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


def _quantized_cases(tiny_qwen3: Path):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    flagged = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    flagged.is_loaded_in_4bit = True  # what transformers' bitsandbytes quantizer sets on a 4-bit model
    return [
        (str(tiny_qwen3), {"model_init_kwargs": {"quantization_config": BitsAndBytesConfig(load_in_4bit=True)}}, {}),
        (str(tiny_qwen3), {"model_init_kwargs": {"quantization_config": {"load_in_8bit": True}}}, {}),
        (str(tiny_qwen3), {}, {"quantization_config": BitsAndBytesConfig(load_in_4bit=True)}),
        (flagged, {}, {}),
    ]


def test_population_with_vllm_on_a_quantized_base_is_refused(tiny_qwen3: Path, tmp_path: Path) -> None:
    from trainer_helpers import ToyTask, lora_config, make_config, prompt_dataset

    from divrl import DivRLTrainer

    for model, config, kwargs in _quantized_cases(tiny_qwen3):
        args = make_config(tmp_path, population=True, population_size=2, population_top_m=1,
                           population_held_prompts=2, use_vllm=True, **config)
        with pytest.raises(ValueError, match=r"population.*use_vllm.*requantis"):
            DivRLTrainer(model, args=args, train_dataset=prompt_dataset(), peft_config=lora_config(),
                         task=ToyTask(), **kwargs)


def test_quantized_base_detection(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from divrl.trainers.divrl_trainer import quantized_base

    for model, config, kwargs in _quantized_cases(tiny_qwen3):
        assert quantized_base(model, config.get("model_init_kwargs"), kwargs.get("quantization_config"))
    assert quantized_base(str(tiny_qwen3), None, None) is None
    unquantized = {"quantization_config": BitsAndBytesConfig(load_in_4bit=False)}
    assert quantized_base(str(tiny_qwen3), unquantized, None) is None
    assert quantized_base(AutoModelForCausalLM.from_pretrained(tiny_qwen3), None, None) is None


@pytest.mark.slow
def test_soup_svd_is_computed_on_rank_zero_and_broadcast(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    import torch

    script = Path(__file__).parents[1] / "helpers" / "soup_broadcast_script.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{i}.pt", weights_only=True) for i in range(2)]
    assert ranks[0]["svd_calls"] == 2 and ranks[1]["svd_calls"] == 0, "one SVD per layer, on rank 0 only"
    assert ranks[0]["error"] == ranks[1]["error"] > 0
    for a, b in zip(ranks[0]["factors"], ranks[1]["factors"], strict=True):
        assert torch.equal(a, b)
