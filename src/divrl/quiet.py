"""A quiet console: no progress-bar redraws in log files, and no upstream deprecation notices divrl cannot act on.

tqdm redraws a bar with carriage returns; in a log file (stderr not a terminal) every redraw becomes part of one long
`\\r` line. transformers 5 deprecates names that TRL and PEFT still use (`is_gradient_checkpointing`,
`gradient_checkpointing_enable`, TrainingArguments' `gradient_checkpointing`), and each use prints a FutureWarning a
divrl user can do nothing about; they are filtered only around the divrl calls into TRL and PEFT that trigger them.
divrl's own code uses the new names (`DivRLConfig.activation_checkpointing`, `activation_checkpointing_off`), so
nothing of its own is filtered.

bitsandbytes, imported on a CPU with AVX512-BF16, tries to fetch a 4-bit CPU matmul kernel from the Hugging Face hub
and logs "Failed to load CPU gemm_4bit_forward ... pip install kernels" when it cannot. divrl never runs 4-bit on the
CPU (`divrl.models.load_model_and_tokenizer` loads unquantized weights there), so that line is dropped too.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# FutureWarnings transformers raises when TRL or PEFT use its deprecated gradient-checkpointing names.
UPSTREAM_DEPRECATIONS = ("`is_gradient_checkpointing` is deprecated", "`gradient_checkpointing` is deprecated",
                         "`gradient_checkpointing_enable` is deprecated", "`gradient_checkpointing_disable` is "
                         "deprecated")
# The logger and message start of bitsandbytes' notice that it could not fetch its CPU 4-bit kernel.
CPU_KERNEL_NOTICE = ("bitsandbytes.backends.cpu.ops", "Failed to load CPU gemm_4bit_forward")
# Environment switches that turn progress bars off; tqdm reads TQDM_* when it is first imported.
NO_PROGRESS_BARS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def quiet_progress_bars() -> bool:
    """Turn tqdm's bars off for this process and its children when stderr is not a terminal (a setting the user made
    wins); True when it did. Call before tqdm is imported (the `divrl` entry points do, first thing)."""
    if sys.stderr.isatty():
        return False
    for name, value in NO_PROGRESS_BARS.items():
        os.environ.setdefault(name, value)
    return True


def _not_the_cpu_kernel_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(CPU_KERNEL_NOTICE[1])


def quiet_console() -> None:
    """What divrl's entry points call first: progress bars off in log files (`quiet_progress_bars`), and
    bitsandbytes' CPU-kernel notice dropped (its logger keeps every other record)."""
    quiet_progress_bars()
    logger = logging.getLogger(CPU_KERNEL_NOTICE[0])
    if _not_the_cpu_kernel_notice not in logger.filters:
        logger.addFilter(_not_the_cpu_kernel_notice)


@contextmanager
def upstream_deprecations_silenced() -> Iterator[None]:
    """Within the block, the FutureWarnings of UPSTREAM_DEPRECATIONS are not shown (every other warning is)."""
    with warnings.catch_warnings():
        for message in UPSTREAM_DEPRECATIONS:
            warnings.filterwarnings("ignore", message=re.escape(message), category=FutureWarning)
        yield
