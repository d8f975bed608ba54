"""What the manifest's sha256 checksums (issue 44) add to a checkpoint save of the embedded Gemma-3-270M with a LoRA
adapter (r 16 on every linear layer), on this machine's CPU.

A checkpoint of that run holds what `Trainer._save_checkpoint` writes: the adapter (`save_pretrained`), the
tokenizer files TRL saves with it, `optimizer.pt` (AdamW's two moments of every LoRA parameter), the scheduler, RNG
and trainer states, and divrl's `divrl_state.pt`. The benchmark writes those files the way transformers does (no
training step: the bytes, not their values, cost the time), then times `write_manifest` on the folder (hashing
every file's bytes and writing the manifest), and `BackgroundManifest.start` (what the training step waits for:
the hashing runs in a thread). Median of `--repeats` rounds, each into a fresh folder; the files are in the page
cache when hashed, as they are right after a real save.
Writes benchmarks/results/checkpoint_hashing.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from divrl.trainers.checkpoint import STATE_FILE, BackgroundManifest, write_manifest

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"


def _save(model: Any, tokenizer: Any, optimizer_state: dict[str, Any], folder: Path) -> None:
    """The files of one LoRA checkpoint, written as transformers and divrl write them."""
    folder.mkdir(parents=True)
    torch.save({"archives": {}}, folder / STATE_FILE)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    torch.save(optimizer_state, folder / "optimizer.pt")
    torch.save({"last_epoch": 1}, folder / "scheduler.pt")
    torch.save({"python": None, "cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1, "log_history": []}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:gemma-3-270m")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from peft import LoraConfig, get_peft_model

    from divrl.models import load_model_and_tokenizer

    base, tokenizer = load_model_and_tokenizer(args.model, quantize="none", dtype="float32", cpu=True)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer_state = {"state": {i: {"step": torch.tensor(1.0), "exp_avg": torch.randn_like(p),
                                     "exp_avg_sq": torch.rand_like(p)} for i, p in enumerate(trained)},
                       "param_groups": [{"lr": 1e-5, "params": list(range(len(trained)))}]}
    save_s, hash_s, start_s, sizes = [], [], [], []
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.repeats):
            folder = Path(scratch) / f"checkpoint-{round_}"
            began = time.perf_counter()
            _save(model, tokenizer, optimizer_state, folder)
            save_s.append(time.perf_counter() - began)
            sizes.append(sum(p.stat().st_size for p in folder.iterdir()))
            began = time.perf_counter()
            write_manifest(str(folder))
            hash_s.append(time.perf_counter() - began)
            background = BackgroundManifest()
            began = time.perf_counter()
            background.start(lambda folder=folder: write_manifest(str(folder)))
            start_s.append(time.perf_counter() - began)
            background.wait()
    save, hashing, start = (statistics.median(v) for v in (save_s, hash_s, start_s))
    result = {
        "model": args.model, "lora": "r 16, all-linear", "checkpoint_bytes": sizes[0],
        "trainable_parameters": sum(p.numel() for p in trained), "repeats": args.repeats,
        "save_s": save, "manifest_with_sha256_s": hashing, "ratio_hash_to_save": hashing / save,
        "critical_path_s": start, "ratio_critical_path_to_save": start / save,
        "save_s_all": save_s, "manifest_s_all": hash_s, "cpu": cpu_model(), "threads": args.threads,
        "torch": torch.__version__, "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    lines = [
        "## Checkpoint hashing (issue 44, `benchmarks/micro/checkpoint_hashing.py`)", "",
        f"{args.model} with a LoRA adapter ({result['lora']}, {result['trainable_parameters']:,} trainable "
        f"parameters); a checkpoint of {sizes[0] / 2**20:.1f} MiB; median of {args.repeats} rounds on "
        f"{result['cpu']} ({args.threads} torch thread), {result['date']}.", "",
        "| | seconds | / save |", "|---|---|---|",
        f"| save (the checkpoint's files) | {save:.3f} | 1 |",
        f"| manifest with sha256 of every file (synchronous) | {hashing:.3f} | {hashing / save:.3f} |",
        f"| what the training step waits for (`BackgroundManifest.start`) | {start:.5f} | {start / save:.5f} |", "",
        "The hashing itself runs in a thread while training continues, and is joined before the next save.",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "checkpoint_hashing.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "checkpoint_hashing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
