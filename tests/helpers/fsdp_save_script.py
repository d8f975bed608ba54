"""Run by test_fsdp_save.py under `torchrun --nproc_per_node 2` (gloo, CPU): a LoRA model really sharded by FSDP2
(`fully_shard`), saved through `divrl.trainers.fsdp.save_gathered_weights`, must give the adapter it holds.

The trainer is a stand-in with the attributes the function reads: transformers' Trainer runs FSDP only on
accelerators, so `accelerator.get_state_dict` is given here as accelerate's FSDP2 branch computes it
(`get_model_state_dict` with a full, rank-0-broadcast, CPU-offloaded state dict), and `_save` as Trainer's for a
PEFT model (`save_pretrained` with that state dict)."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist


def main(model_path: str, out: str) -> None:
    from peft import LoraConfig, get_peft_model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from divrl.trainers.fsdp import save_gathered_weights, saves_no_weights

    dist.init_process_group("gloo")
    torch.manual_seed(0)  # every rank builds the same model before sharding it
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_path),
                           LoraConfig(r=4, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_()  # lora_B starts at zero: give every factor a value to check
    expected = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert any(type(p).__name__ == "DTensor" for p in model.parameters()), "the model is not sharded"
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, cpu_offload=True)
    plugin = SimpleNamespace(state_dict_type="StateDictType.SHARDED_STATE_DICT")
    trainer = SimpleNamespace(
        is_fsdp_enabled=True, model=model, args=SimpleNamespace(should_save=dist.get_rank() == 0),
        accelerator=SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin),
                                    get_state_dict=lambda m: get_model_state_dict(m, options=options)),
        _save=lambda output_dir, state_dict: model.save_pretrained(output_dir, state_dict=state_dict))
    assert saves_no_weights(trainer)
    save_gathered_weights(trainer, out)
    if dist.get_rank() == 0:
        torch.save(expected, os.path.join(out, "expected.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
