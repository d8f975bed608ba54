"""`divrl doctor`: what to run first on a new machine. It prints the versions of the stack, the devices and their
memory, whether bitsandbytes' CUDA kernels load, then trains 2 steps of every method on a tiny local model on that
device (fp32 on the CPU; bf16 and 4-bit NF4 on CUDA) and 2 IPS steps of the shipped chemical LM on the molecule task,
printing a table row per check as it finishes (ok, or failed with the reason in one line), and ends with the count.
It exits 0 only if everything that should run there ran."""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import traceback
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("divrl", "torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm")
# Settings a method needs on top of its preset to run on a 4-row batch (members, held-out prompts, a ratio).
EXTRA_SETTINGS: dict[str, dict[str, Any]] = {
    "population": {"population_size": 2, "population_top_m": 1, "population_interval": 1,
                   "population_held_prompts": 2},
    "cov": {"cov_method": "clip_cov", "cov_ratio": 0.2},
    "zero_flat_groups": {"zero_flat_groups": True},
    "passk": {"passk": 2},  # the preset's k = 4 needs groups larger than the checks' 4
}
PROMPTS = ["solve 2 + 3", "the answer is", "one two three", "a molecule ring"]
NAME_WIDTH = 40  # the check column: wider than every check's name, so rows printed as they finish line up


@dataclass
class Check:
    """One line of the final table."""

    name: str
    ok: bool
    detail: str


def method_cases() -> dict[str, dict[str, Any]]:
    """Plain GRPO, then every registered method with its preset (plus what it needs on a tiny batch)."""
    from divrl.methods import REGISTRY

    cases: dict[str, dict[str, Any]] = {"grpo": {}}
    for name, method in REGISTRY.items():
        settings = {**method.preset, **EXTRA_SETTINGS.get(name, {})}
        if settings:  # outcome_keys has no switch of its own: it is IPS's setting
            cases[name] = settings
    return cases


def versions() -> dict[str, str]:
    """Installed version of each package of the stack ("not installed" where absent)."""
    found = {}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def devices() -> list[str]:
    """One line per device: CUDA GPUs with free / total memory, else the CPU's cores and memory."""
    import torch

    if torch.cuda.is_available():
        lines = []
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            lines.append(f"cuda:{index} {torch.cuda.get_device_name(index)}: {free / 2**30:.1f} GiB free of "
                         f"{total / 2**30:.1f} GiB")
        return lines
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return [f"cpu: {os.cpu_count()} cores, {pages * page_size / 2**30:.1f} GiB memory, "
            f"capability {torch.backends.cpu.get_cpu_capability()}; no CUDA device"]


def bitsandbytes_check() -> Check | None:
    """Quantise and dequantise a tensor with bitsandbytes' NF4 kernels on CUDA; None without CUDA (not expected)."""
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        import bitsandbytes.functional as bnb_functional

        weights = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        packed, state = bnb_functional.quantize_4bit(weights, quant_type="nf4")
        error = (bnb_functional.dequantize_4bit(packed, state) - weights).abs().mean().item()
    except Exception as exc:  # any failure to load or run the kernels is the finding
        return Check("bitsandbytes CUDA kernels", False, one_line(exc))
    return Check("bitsandbytes CUDA kernels", True, f"NF4 round trip, mean abs error {error:.3f}")


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type, message and where in the code it was raised."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message[:200]}{where}"


def precisions() -> list[str]:
    """What to train in on this machine: fp32 on the CPU; bf16 and NF4 on CUDA."""
    import torch

    return ["bf16", "nf4"] if torch.cuda.is_available() else ["fp32"]


def train_two_steps(model_dir: Path, out: Path, settings: dict[str, Any], precision: str) -> str:
    """2 steps of DivRLTrainer with `settings` on the tiny model; a short summary, or the exception it raised."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.models import default_lora_config, load_model_and_tokenizer
    from divrl.testing import ToyTask

    cuda = precision != "fp32"
    model, tokenizer = load_model_and_tokenizer(str(model_dir), quantize="4bit" if precision == "nf4" else "none",
                                                dtype="bfloat16" if cuda else "float32", cpu=not cuda,
                                                log=lambda message: None)
    args = DivRLConfig(output_dir=str(out), use_cpu=not cuda, bf16=cuda, per_device_train_batch_size=4,
                       num_generations=4, max_completion_length=8, max_steps=2, learning_rate=1e-3, logging_steps=1,
                       report_to=[], save_strategy="no", disable_tqdm=True, seed=0, **settings)
    trainer = DivRLTrainer(model, args=args, train_dataset=Dataset.from_dict({"prompt": PROMPTS * 2}),
                           processing_class=tokenizer, peft_config=default_lora_config(r=4, lora_alpha=8),
                           task=ToyTask())
    trainer.remove_callback(PrinterCallback)  # the doctor prints one line per check, not the Trainer's log dicts
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if len(losses) != 2 or not all(torch.isfinite(torch.tensor(losses))):
        raise RuntimeError(f"expected 2 finite losses, got {losses}")
    return f"2 steps, loss {losses[-1]:.4f}"


def chemical_lm_steps(out: Path, precision: str) -> str:
    """2 IPS-GRPO steps of the shipped chemical LM (`embedded:smiles-clm`) on the molecule task from its empty
    prompt, every weight trained (as REINVENT does); a short summary with the samples' validity."""
    from transformers import PrinterCallback

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.methods import presets_of
    from divrl.models import load_model_and_tokenizer
    from divrl.tasks.molecules import MoleculeTask, build_dataset

    cuda = precision != "fp32"
    model, tokenizer = load_model_and_tokenizer("embedded:smiles-clm", quantize="none",
                                                dtype="bfloat16" if cuda else "float32", cpu=not cuda,
                                                log=lambda message: None)
    args = DivRLConfig(output_dir=str(out), use_cpu=not cuda, bf16=cuda, per_device_train_batch_size=16,
                       num_generations=16, max_completion_length=100, max_steps=2, learning_rate=1e-4,
                       logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True, seed=0,
                       **presets_of("ips"))
    trainer = DivRLTrainer(model, args=args, train_dataset=build_dataset(2, style="clm"), processing_class=tokenizer,
                           task=MoleculeTask())
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    validity = [entry["molecules/validity"] for entry in trainer.state.log_history if "molecules/validity" in entry]
    if len(validity) != 2:
        raise RuntimeError(f"expected 2 logged steps, got {trainer.state.log_history}")
    return f"2 IPS steps, full fine-tuning, validity {sum(validity) / 2:.2f}"


def run_checks(methods: list[str] | None = None, log: Any = print) -> list[Check]:
    """Every training check this machine should pass, in order, each isolated (one failure does not stop the rest)
    and logged as its table row (`row`) when it has run."""
    from divrl.testing import build_tiny_model

    cases = method_cases()
    unknown = sorted(set(methods or []) - set(cases))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; divrl doctor checks: {', '.join(cases)}")
    checks = []
    with tempfile.TemporaryDirectory(prefix="divrl-doctor-") as folder:
        model_dir = build_tiny_model("qwen3", Path(folder) / "tiny-qwen3")
        for precision in precisions():
            for name in methods or cases:
                label = f"train {name} ({precision})"
                started = time.perf_counter()
                try:
                    summary = train_two_steps(model_dir, Path(folder) / "runs" / f"{name}-{precision}",
                                              cases[name], precision)
                    check = Check(label, True, f"{summary}, {time.perf_counter() - started:.1f} s")
                except Exception as exc:  # the doctor reports every failure and goes on
                    check = Check(label, False, one_line(exc))
                log(row(check))
                checks.append(check)
        if methods is None:  # the chemical LM is small: fp32 on the CPU, bf16 on CUDA, never quantised
            precision = precisions()[0]
            label, started = f"chemical LM embedded:smiles-clm ({precision})", time.perf_counter()
            try:
                summary = chemical_lm_steps(Path(folder) / "runs" / f"smiles-clm-{precision}", precision)
                check = Check(label, True, f"{summary}, {time.perf_counter() - started:.1f} s")
            except Exception as exc:  # reported like every other check
                check = Check(label, False, one_line(exc))
            log(row(check))
            checks.append(check)
    return checks


HEADER = f"{'check'.ljust(NAME_WIDTH)}  result\n{'-' * NAME_WIDTH}  ------"


def row(check: Check) -> str:
    """The table's row of one check, printed as soon as it has run."""
    return f"{check.name.ljust(NAME_WIDTH)}  {'ok' if check.ok else 'FAILED'}: {check.detail}"


def main(args: argparse.Namespace) -> int:
    """Print the stack and devices, run the checks, print the table; 0 only when every check passed."""
    from transformers.utils import logging as transformers_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the checks build their model locally
    transformers_logging.disable_progress_bar()  # no weight-loading bars between the check lines
    print("divrl doctor")
    for package, version in versions().items():
        print(f"  {package:<13} {version}")
    for line in devices():
        print(f"  {line}")
    print()
    print(HEADER)
    checks = [c for c in [bitsandbytes_check()] if c is not None]
    for check in checks:
        print(row(check))
    checks += run_checks(args.methods)
    failed = sum(not c.ok for c in checks)
    print(f"\n{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl doctor [--methods NAME ...]`."""
    parser = subparsers.add_parser("doctor", help="Check this machine: versions, devices, and 2 training steps of "
                                   "every method on a tiny model (run it first on a new machine).",
                                   description=__doc__)
    parser.add_argument("--methods", nargs="+", metavar="NAME",
                        help="check only these methods (default: plain GRPO and every registered method)")
    parser.set_defaults(func=main)


