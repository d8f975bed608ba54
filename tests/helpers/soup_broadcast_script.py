"""Run by test_gpu_safety.py: two gloo processes soup the same LoRA adapters while each process's SVD returns
differently signed factors (as SVDs on different devices may); every process must end with rank 0's factors.

    python soup_broadcast_script.py OUTPUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path


def worker(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from peft import LoraConfig, get_peft_model

    import divrl.trainers.population as population

    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank, world_size=2)
    calls = []
    project = population.project_to_rank

    def signed_projection(delta, rank_, scale):  # rank 1's SVD flips the sign of every singular pair
        calls.append(rank)
        lora_a, lora_b, error = project(delta, rank_, scale)
        return (lora_a, lora_b, error) if rank == 0 else (-lora_a, -lora_b, error)

    population.project_to_rank = signed_projection

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(6, 5)
            self.out = torch.nn.Linear(5, 4)

        def forward(self, x):
            return self.out(self.proj(x))

    torch.manual_seed(0)
    model = get_peft_model(Tiny(), LoraConfig(r=2, lora_alpha=4, target_modules=["proj", "out"]))
    model.add_adapter("member_1", LoraConfig(r=2, lora_alpha=4, target_modules=["proj", "out"]))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in ("default", "member_1"):
            for param in population.adapter_parameters(model, name):
                param.copy_(torch.randn(param.shape, generator=generator))
    error = population.soup_adapters(model, ["default", "member_1"], ["default", "member_1"], rank=1)
    factors = [p.detach().clone() for name in ("default", "member_1")
               for p in population.adapter_parameters(model, name)]
    torch.save({"factors": factors, "error": error, "svd_calls": len(calls)}, f"{out}/rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(str(Path(sys.argv[1]).resolve()),), nprocs=2, join=True)
