"""The campaigns' legacy weight files (LoRA adapters), listed in benchmarks/evidence/weights.tsv so they can leave
the work tree and still be read: each row keeps a file's path, size, sha256 and the commit that added it, and
`restore` writes a missing file back from that commit, checked against its sha256. New weights are not committed
(tests/project/test_repository_weight.py): a campaign rebuilds them from its recorded commands or keeps them outside the
repository with their sha256 committed.

    python benchmarks/evidence_weights.py list               # every row, and whether its file is in the tree
    python benchmarks/evidence_weights.py check              # the rows match the tree and the history
    python benchmarks/evidence_weights.py restore [PATHS]    # write missing files back from git history

Restoring needs the history: a shallow clone (`git clone --depth 1`) lacks it until `git fetch --unshallow`; a
blob-filtered clone (`--filter=blob:limit=1m`) fetches each file from its remote on demand.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = "benchmarks/evidence/weights.tsv"
COLUMNS = ("path", "bytes", "sha256", "commit")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")
# weights divrl ships to users (the embedded chemical LM) and the tests' golden checkpoints may be tracked
SHIPPED_DIRS = ("src/divrl/embedded/", "tests/golden/")
NEW_WEIGHTS_RULE = ("model weights are not committed: rebuild them from the command that made them, or keep them "
                    "outside the repository with their sha256 committed; weights divrl ships to users go under "
                    "src/divrl/embedded/")


class WeightError(RuntimeError):
    """A manifest row, a restore or the history it needs is not as recorded."""


@dataclass(frozen=True)
class WeightRecord:
    """One row of the manifest: a file's repository path, size in bytes, sha256 and the commit that added it."""

    path: str
    size: int
    sha256: str
    commit: str


def read_manifest(root: Path = ROOT) -> list[WeightRecord]:
    """The rows of `root`'s weights.tsv (header `path bytes sha256 commit`, tab-separated); a malformed row raises."""
    lines = (root / MANIFEST).read_text().splitlines()
    if not lines or tuple(lines[0].split("\t")) != COLUMNS:
        raise WeightError(f"{MANIFEST}: the first line must be the header {chr(9).join(COLUMNS)!r}")
    records = []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if (len(fields) != 4 or not fields[1].isdigit() or not re.fullmatch(r"[0-9a-f]{64}", fields[2])
                or not re.fullmatch(r"[0-9a-f]{40}", fields[3])):
            raise WeightError(f"{MANIFEST} line {number}: expected a path, a byte count, a 64-hex sha256 and a "
                              f"40-hex commit separated by tabs, got {line!r}")
        path = PurePosixPath(fields[0])
        if path.is_absolute() or ".." in path.parts:
            raise WeightError(f"{MANIFEST} line {number}: {fields[0]!r} is not a path inside the repository")
        records.append(WeightRecord(fields[0], int(fields[1]), fields[2], fields[3]))
    duplicates = sorted(path for path, count in Counter(r.path for r in records).items() if count > 1)
    if duplicates:
        raise WeightError(f"{MANIFEST}: listed more than once: {', '.join(duplicates)}")
    return records


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """A git command in `root`, its output captured (the caller reads the return code)."""
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)


def tracked_files(root: Path = ROOT) -> list[str]:
    """Every path git tracks in `root` (the index), repository-relative."""
    listing = _git(root, "ls-files", "-z")
    if listing.returncode != 0:
        raise WeightError(f"{root} is not a git checkout: {listing.stderr.decode().strip()}")
    return [path for path in listing.stdout.decode().split("\0") if path]


def unlisted_weights(root: Path = ROOT) -> list[str]:
    """Tracked weight files that are neither shipped (`SHIPPED_DIRS`) nor legacy campaign files in the manifest."""
    listed = {record.path for record in read_manifest(root)}
    return [path for path in tracked_files(root) if path.lower().endswith(WEIGHT_SUFFIXES)
            and not path.startswith(SHIPPED_DIRS) and path not in listed]


def history_bytes(record: WeightRecord, root: Path = ROOT) -> bytes:
    """The file's bytes at its recorded commit; raises, saying how to get the history, when this clone lacks it."""
    if _git(root, "cat-file", "-e", f"{record.commit}^{{commit}}").returncode != 0:
        shallow = _git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == b"true"
        how = ("this clone is shallow (`git clone --depth 1`): run `git fetch --unshallow`, or clone without --depth"
               if shallow else "fetch the full history (`git fetch origin`) or clone the repository again")
        raise WeightError(f"{record.path}: its commit {record.commit[:12]} is not in this clone; {how}")
    blob = _git(root, "cat-file", "blob", f"{record.commit}:{record.path}")  # a blob-filtered clone fetches it here
    if blob.returncode != 0:
        reason = (blob.stderr.decode().strip().splitlines() or ["no message"])[-1]
        raise WeightError(f"{record.path}: git could not read it at {record.commit[:12]}: {reason}")
    return blob.stdout


def _mismatch(record: WeightRecord, data: bytes, where: str) -> str | None:
    """What differs between `data` and the record (size, then sha256), or None when they match."""
    if len(data) != record.size:
        return f"{record.path}: {where} holds {len(data)} bytes, {MANIFEST} says {record.size}"
    if hashlib.sha256(data).hexdigest() != record.sha256:
        return f"{record.path}: {where} has sha256 {hashlib.sha256(data).hexdigest()}, {MANIFEST} says {record.sha256}"
    return None


def restore(paths: list[str] | None = None, root: Path = ROOT) -> list[Path]:
    """Write each listed file that is missing from the work tree back from its commit (all rows, or `paths`,
    repository-relative or absolute), after checking its size and sha256; returns the files written."""
    records = {record.path: record for record in read_manifest(root)}
    wanted = list(records) if paths is None else [_repository_path(path, root) for path in paths]
    unknown = [path for path in wanted if path not in records]
    if unknown:
        raise WeightError(f"not listed in {MANIFEST}: {', '.join(unknown)}")
    written = []
    for path in wanted:
        target = root / path
        if target.exists():
            continue
        data = history_bytes(records[path], root)
        problem = _mismatch(records[path], data, "git history")
        if problem:
            raise WeightError(problem)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, target)
        written.append(target)
    return written


def _repository_path(path: str | Path, root: Path) -> str:
    """`path` relative to `root` in POSIX form (an absolute path must lie inside `root`)."""
    candidate = Path(path)
    if candidate.is_absolute():
        if not candidate.resolve().is_relative_to(root.resolve()):
            raise WeightError(f"{path} is outside the repository {root}")
        candidate = candidate.resolve().relative_to(root.resolve())
    return candidate.as_posix()


def ensure_weight(path: Path, root: Path = ROOT) -> Path:
    """The drivers' one call before they read a weight file: restores `path` from git history when it is missing
    and the manifest lists it; any other path is left as it is. Returns `path`."""
    if path.exists() or not path.resolve().is_relative_to(root.resolve()):  # a state folder elsewhere: no legacy
        return path
    relative = _repository_path(path.resolve(), root)
    if relative in {record.path for record in read_manifest(root)} and restore([relative], root):
        print(f"  restored {relative} from git history ({MANIFEST})", flush=True)
    return path


def check(root: Path = ROOT) -> list[str]:
    """Every disagreement between the manifest and `root`: a row whose history blob or work-tree file differs from
    it (or whose history this clone lacks), and tracked weight files it does not list."""
    problems = [f"{path}: a weight file tracked outside {', '.join(SHIPPED_DIRS)} and not in {MANIFEST} "
                f"({NEW_WEIGHTS_RULE})" for path in unlisted_weights(root)]
    for record in read_manifest(root):
        try:
            problems.append(_mismatch(record, history_bytes(record, root), f"commit {record.commit[:12]}"))
        except WeightError as error:
            problems.append(str(error))
        if (root / record.path).is_file():
            problems.append(_mismatch(record, (root / record.path).read_bytes(), "the work tree"))
    return [problem for problem in problems if problem]


def main(argv: list[str] | None = None) -> int:
    """The command line: list, check or restore."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="every row, and whether its file is in the work tree")
    commands.add_parser("check", help="the rows match the work tree and the git history")
    restoring = commands.add_parser("restore", help="write missing files back from git history")
    restoring.add_argument("paths", nargs="*", help="files to restore (default: every missing one)")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            records = read_manifest()
            for record in records:
                state = "in the tree" if (ROOT / record.path).is_file() else "missing (restore)"
                print(f"{record.path}\t{record.size / 2**20:.1f} MiB\t{record.sha256[:12]}\t{record.commit[:12]}"
                      f"\t{state}")
            print(f"{len(records)} files, {sum(r.size for r in records) / 2**20:.0f} MiB")
        elif args.command == "check":
            problems = check()
            for problem in problems:
                print(problem)
            print(f"{len(problems)} problems" if problems else f"ok: {MANIFEST} matches the work tree and history")
            return 1 if problems else 0
        else:
            written = restore(args.paths or None)
            for path in written:
                print(f"restored {path.relative_to(ROOT)}")
            print(f"{len(written)} files restored")
    except WeightError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
