"""Under FSDP with sharded state dicts the trained LoRA adapter is still written as a normal PEFT adapter (issue 43:
a run's output_dir held only checkpoint shards)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_an_fsdp2_sharded_lora_model_saves_the_adapter_it_holds(tiny_qwen3: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "adapter"
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "tests" / "helpers" / "fsdp_save_script.py"), str(tiny_qwen3), str(out)],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "adapter_model.safetensors").is_file() and (out / "adapter_config.json").is_file()
    expected = torch.load(out / "expected.pt", weights_only=True)
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen3), str(out))
    weights = {n: p for n, p in loaded.named_parameters() if "lora_" in n}
    assert weights.keys() == expected.keys() and len(weights) > 0
    for name, value in expected.items():
        assert torch.equal(weights[name], value), name  # gathered exactly, on one machine


def test_only_a_sharded_fsdp_save_needs_the_gathered_weights() -> None:
    from divrl.trainers.fsdp import saves_no_weights

    def trainer(fsdp: bool, kind: str) -> SimpleNamespace:
        plugin = SimpleNamespace(state_dict_type=kind)
        return SimpleNamespace(is_fsdp_enabled=fsdp, accelerator=SimpleNamespace(state=SimpleNamespace(
            fsdp_plugin=plugin)))

    assert saves_no_weights(trainer(True, "StateDictType.SHARDED_STATE_DICT"))
    assert not saves_no_weights(trainer(True, "StateDictType.FULL_STATE_DICT"))  # Trainer saves those itself
    assert not saves_no_weights(trainer(False, "StateDictType.SHARDED_STATE_DICT"))
