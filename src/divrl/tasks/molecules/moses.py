"""The MOSES benchmark's SMILES splits (Polykovskiy et al., 2020; MIT licence), read from PyPI's `molsets` wheel.

The wheel pins long-dead dependencies (pomegranate 0.12), so divrl never installs it: `moses_split` downloads the
wheel alone (`pip download --no-deps`), checks its sha256, and unpacks the three split files into
`$DIVRL_CACHE/data/moses/`, each checked against its own sha256. Train is for pretraining; test and scaffold test
are kept for the prior's metrics.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from divrl.models import cache_dir

MOSES_WHEEL = "molsets-0.3.1-py3-none-any.whl"
MOSES_REQUIREMENT = "molsets==0.3.1"
MOSES_WHEEL_SHA256 = "7f4450e3ebecebe79c3a2a55950c93daddee071120daf64a163d03481e811d34"
# split -> (path inside the wheel, sha256 of that file)
MOSES_SPLITS: dict[str, tuple[str, str]] = {
    "train": ("moses/dataset/data/train.csv.gz", "786f0313aa6b9ba5514df685f885742a70ea8d86f1a4fa48115f7f80a634265c"),
    "test": ("moses/dataset/data/test.csv.gz", "f896fbf3764f88d94670b9959e5872c600c12152a18233823e820761b7a791b2"),
    "test_scaffolds": (
        "moses/dataset/data/test_scaffolds.csv.gz",
        "adffb2192c1bfe31ab0e13154d4af19a37dc18bdbf3cd7b4491e04405128adde",
    ),
}


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def moses_dir() -> Path:
    """Where the unpacked MOSES splits live."""
    return cache_dir() / "data" / "moses"


def moses_split(split: str, wheel: Path | None = None) -> Path:
    """Path of the checked `split` file (`train`, `test` or `test_scaffolds`), unpacking it from `wheel` (default:
    downloaded with pip on first use) when the cache lacks it."""
    if split not in MOSES_SPLITS:
        raise ValueError(f"unknown MOSES split {split!r}; known: {sorted(MOSES_SPLITS)}")
    inner, expected = MOSES_SPLITS[split]
    target = moses_dir() / Path(inner).name
    if target.is_file() and sha256_file(target) == expected:
        return target
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(wheel) if wheel is not None else _download_wheel(Path(scratch))
        if sha256_file(source) != MOSES_WHEEL_SHA256:
            raise ValueError(f"{source} is not the molsets 0.3.1 wheel divrl knows (sha256 differs)")
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(source) as archive:
            for name, (member, digest) in MOSES_SPLITS.items():
                data = archive.read(member)
                if hashlib.sha256(data).hexdigest() != digest:
                    raise ValueError(f"the MOSES {name} split in {source} does not match its sha256")
                partial = target.parent / f".{Path(member).name}.partial"
                partial.write_bytes(data)
                partial.replace(target.parent / Path(member).name)
    return target


def _download_wheel(into: Path) -> Path:
    """`pip download --no-deps molsets==0.3.1` into `into`; ValueError with pip's last line when it fails."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(into),
               MOSES_REQUIREMENT]
    done = subprocess.run(command, capture_output=True, text=True)
    wheel = into / MOSES_WHEEL
    if done.returncode != 0 or not wheel.is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ValueError(f"could not download the MOSES data ({MOSES_REQUIREMENT}): {last[0]}; "
                         f"download the wheel elsewhere and pass it with --moses-wheel")
    return wheel


def read_smiles_file(path: Path) -> list[str]:
    """SMILES from a MOSES-style CSV (a `SMILES` column; optionally gzipped) or a plain file with one per line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    lines = text.splitlines()
    if lines and lines[0].strip().upper().startswith("SMILES"):
        reader = csv.DictReader(io.StringIO(text))
        column = next(name for name in reader.fieldnames or [] if name.strip().upper() == "SMILES")
        smiles = [row[column].strip() for row in reader]
    else:
        smiles = [line.split()[0] for line in lines if line.strip()]
    empty = [index for index, value in enumerate(smiles) if not value]
    if empty:
        raise ValueError(f"{path}: row {empty[0] + 2} has an empty SMILES")
    if not smiles:
        raise ValueError(f"{path} holds no SMILES")
    return smiles
