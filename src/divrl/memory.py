"""Give freed CPU memory back to the operating system (glibc's allocator on Linux; a no-op elsewhere).

PyTorch allocates CPU tensors with malloc. glibc serves requests above its mmap threshold with their own
`mmap`, returned to the system on free, and everything smaller from its heap, which keeps freed memory for
reuse. The threshold starts at 128 KiB but rises to the size of each mmapped block that is freed, up to 32 MiB,
so after the first few tensors almost every activation of a training step (a few MiB to 31 MiB each for the
embedded Gemma-3-270M) lands in the heap. The heap then fragments and keeps whatever a step freed: measured
on the demo's loss step (one group of 8 x 475 tokens), 1.7 GiB stayed resident after the backward pass and
the peak was 3.9 GiB, against 3.0 GiB with a fixed 1 MiB threshold, after which the process went back to the
1.8 GiB of the model and libraries (before the CPU recipes shared the prompt across a group, the same step kept
8.9 GiB of freed heap, which `divrl demo` then carried into evaluation: the 10 GB of issue 12).

`return_large_frees_to_os()` fixes the threshold (which also stops glibc from raising it), so tensors of
`LARGE_ALLOCATION_BYTES` and more are mapped and unmapped on their own; `release_freed_memory()` collects
garbage and trims the heap, e.g. between the phases of a long process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys

# Allocations at least this large are mmapped (and unmapped on free) once `return_large_frees_to_os` ran.
LARGE_ALLOCATION_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt parameter, glibc's malloc.h


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc's malloc functions, or None where the C library is another one (macOS, musl, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (raises AttributeError outside glibc)
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def return_large_frees_to_os(threshold: int = LARGE_ALLOCATION_BYTES) -> bool:
    """Serve allocations of `threshold` bytes and more with their own mmap from now on (process-wide), so freeing
    a tensor returns its memory at once. True where it took effect (glibc), False elsewhere."""
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1)


def release_freed_memory() -> bool:
    """Collect garbage (reference cycles still holding tensors) and give the heap's free pages back to the system.
    True where the heap could be trimmed (glibc)."""
    gc.collect()
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (the kernel's high-water mark, `ru_maxrss`), in bytes."""
    import resource  # POSIX only

    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, KiB on Linux and the BSDs
