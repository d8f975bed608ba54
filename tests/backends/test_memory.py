"""Memory of long in-process runs (issue 12, `divrl demo` at ~10 GB): freed tensors go back to the system, and a
finished `divrl train` leaves no model behind for the demo's next phase. Structural checks, no RSS thresholds
(the demo's measured peak is in benchmarks/results/demo.md)."""

from __future__ import annotations

import ctypes
import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from divrl import memory

ROOT = Path(__file__).resolve().parents[2]
VOXEL_GRPO = ROOT / "recipes" / "embedded-cpu" / "hypospace-voxel" / "grpo.yaml"


def _has_mallinfo2() -> bool:
    try:
        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018 (glibc >= 2.33)
    except (OSError, AttributeError):
        return False
    return sys.platform.startswith("linux")


# In a fresh process: how many bytes glibc holds in separate mmaps while a 4 MiB tensor lives, after a 24 MiB
# tensor was freed (which raises glibc's dynamic mmap threshold to 24 MiB, as a training step's activations do),
# with or without `return_large_frees_to_os()` first; and how many stay mapped once it is freed.
_MAPPED_SCRIPT = """
import ctypes, json, sys
import torch
from divrl import memory

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
took_effect = memory.return_large_frees_to_os() if sys.argv[1] == "fixed" else None
big = torch.empty(24 << 20, dtype=torch.uint8)
del big
before = libc.mallinfo2().hblkhd
tensor = torch.empty(4 << 20, dtype=torch.uint8)
while_alive = libc.mallinfo2().hblkhd - before
del tensor
print(json.dumps({"took_effect": took_effect, "while_alive": while_alive,
                  "after_free": libc.mallinfo2().hblkhd - before}))
"""


def _mapped(mode: str) -> dict:
    result = subprocess.run([sys.executable, "-c", _MAPPED_SCRIPT, mode], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _has_mallinfo2(), reason="glibc's allocator (Linux, glibc >= 2.33) only")
def test_large_tensors_are_unmapped_when_freed() -> None:
    """Without the setting a 4 MiB tensor comes from the heap (kept after free); with it, from its own mmap."""
    control = _mapped("control")
    assert control["while_alive"] < 4 << 20  # glibc's default: the heap (this is what the setting changes)
    fixed = _mapped("fixed")
    assert fixed["took_effect"] is True
    assert fixed["while_alive"] >= 4 << 20 and fixed["after_free"] <= 0


def test_release_freed_memory_collects_cycles_holding_tensors() -> None:
    import torch

    class Holder:
        pass

    holder = Holder()
    holder.self, holder.tensor = holder, torch.zeros(1024)
    tensor = weakref.ref(holder.tensor)
    del holder
    assert memory.release_freed_memory() == (memory._glibc() is not None)
    assert tensor() is None


def test_peak_rss_is_at_least_the_current_rss() -> None:
    import psutil

    assert memory.peak_rss_bytes() >= psutil.Process().memory_info().rss * 0.5 > 0


@pytest.mark.slow
def test_finished_train_run_leaves_no_model_alive(tiny_qwen3: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`divrl demo` runs `divrl train` twice and then the evaluation in one process: once a run returns, its model
    (and so its weights, LoRA, optimizer and activations) must be collectable, not carried into the next phase."""
    import bitsandbytes  # noqa: F401

    from divrl import models
    from divrl.cli import main

    # Imported above, not first inside the run: on its first import bitsandbytes' CPU backend logs the exception of
    # its failed optional `kernels` import, and pytest keeps that log record, so the exception's traceback would
    # hold the run's frames (and its model) until the test ends, when this test runs alone.
    loaded = []
    load = models.load_model_and_tokenizer

    def load_and_watch(*args, **kwargs):
        model, tokenizer = load(*args, **kwargs)
        loaded.append(weakref.ref(model))
        return model, tokenizer

    monkeypatch.setattr(models, "load_model_and_tokenizer", load_and_watch)
    code = main(["train", str(VOXEL_GRPO), "--model_name_or_path", str(tiny_qwen3), "--output_dir", str(tmp_path),
                 "--max_steps", "1", "--instance_limit", "4", "--save_strategy", "no", "--recovery_eval", "false",
                 "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "8"])
    assert code == 0 and len(loaded) == 1
    gc.collect()
    assert loaded[0]() is None, [type(r).__name__ for r in gc.get_referrers(loaded[0]())]


def _head_positions(model) -> list[int]:
    """Positions per row that each LM-head call of `model` projects (recorded by a forward hook)."""
    positions: list[int] = []
    head = (model.get_base_model() if hasattr(model, "get_base_model") else model).get_output_embeddings()
    head.register_forward_hook(lambda _module, args, _output: positions.append(args[0].shape[-2]))
    return positions


@pytest.mark.parametrize("cpu_fast", [True, False])
def test_sampling_projects_one_position_per_row(tiny_gemma3: Path, cpu_fast: bool) -> None:
    """Evaluation sampling (divrl's CPU decoding, or transformers' loop) computes the 262k-token logits of the last
    position only, prefill included: full-prompt logits would take rows x prompt x 262k x 4 bytes (issue 12)."""
    from divrl.sampling import SamplingConfig, TransformersSampler, load_for_sampling

    model, tokenizer = load_for_sampling(str(tiny_gemma3), quantize="none", dtype="float32")
    sampler = TransformersSampler(model, tokenizer, SamplingConfig(max_new_tokens=4, batch_size=4), cpu_fast=cpu_fast)
    positions = _head_positions(model)
    completions = sampler(["a long enough prompt of several tokens", "another prompt"], n=2)
    assert [len(c) for c in completions] == [2, 2]
    assert positions and set(positions) == {1}, positions


def test_training_generation_projects_one_position_per_row(tiny_gemma3: Path) -> None:
    """The trainers' CPU generation (prefill of each distinct prompt shared by its group) projects one position per
    row too."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from divrl.backends.cpu import add_decode_lm_head, add_decode_sampler

    model = AutoModelForCausalLM.from_pretrained(tiny_gemma3, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_gemma3)
    add_decode_lm_head(model)
    add_decode_sampler(model)
    positions = _head_positions(model)
    inputs = tokenizer(["a long enough prompt of several tokens"] * 4, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=True, max_new_tokens=4, min_new_tokens=4,
                             pad_token_id=tokenizer.pad_token_id or 0)
    assert out.shape == (4, inputs["input_ids"].shape[1] + 4)
    assert positions and set(positions) == {1}, positions
