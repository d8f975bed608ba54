"""Shared fixtures: tiny random Qwen3 / Gemma3 checkpoints with a local tokenizer, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One intra-op thread per test process: the tiny models gain nothing from more, and on a shared 2-core machine
# OpenMP threads competing with other processes made trainer steps 5-10x slower (measured: 0.5 s vs 3-6 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Directories of tiny random checkpoints, one per architecture in `divrl.testing.ARCHITECTURES`."""
    from divrl.testing import ARCHITECTURES, build_tiny_model

    root = tmp_path_factory.mktemp("tiny_models")
    return {arch: build_tiny_model(arch, root / arch) for arch in ARCHITECTURES}


@pytest.fixture(scope="session")
def tiny_qwen3(tiny_model_dirs: dict[str, Path]) -> Path:
    """Path of a tiny random Qwen3 checkpoint (hidden 32, 2 layers)."""
    return tiny_model_dirs["qwen3"]


@pytest.fixture(scope="session")
def tiny_gemma3(tiny_model_dirs: dict[str, Path]) -> Path:
    """Path of a tiny random Gemma3 text checkpoint (hidden 32, 2 layers)."""
    return tiny_model_dirs["gemma3"]


@pytest.fixture(scope="session", params=["qwen3", "gemma3"])
def tiny_model(request: pytest.FixtureRequest, tiny_model_dirs: dict[str, Path]) -> Path:
    """Each tiny checkpoint in turn (parametrised over architectures)."""
    return tiny_model_dirs[request.param]


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A tmpfs mounted at tmp_path/disk, resizable with `mount -o remount,size=...` (test_run_hazards._resize): a
    real small filesystem to fill up; skipped where mounting is not allowed (not root, or in a container without
    CAP_SYS_ADMIN), where test_run_hazards' RLIMIT_FSIZE test still covers a failing save."""
    import shutil
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: the RLIMIT_FSIZE write-failure test covers a failing save")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the RLIMIT_FSIZE write-failure test "
                    "covers a failing save")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
