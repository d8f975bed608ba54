"""The repository stays light to clone (issue 59): no tracked file over a stated size, model weights tracked only where
divrl ships them (or as legacy campaign adapters listed in benchmarks/evidence/weights.tsv, a list that may only
shrink), and a listed adapter removed from the tree comes back from git history with its recorded sha256."""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import evidence_weights as weights  # noqa: E402

if not (ROOT / ".git").exists():
    pytest.skip("these tests read the git checkout (an sdist has none)", allow_module_level=True)

# The shipped chemical LM is 12.9 MB and each legacy adapter 15.2 MB; anything larger does not belong in git.
MAX_TRACKED_BYTES = 16 * 2**20
# benchmarks/evidence/weights.tsv as first written (36 adapters, by commit FROZEN_AT): rows may be removed,
# never added (a row's commit must be in FROZEN_AT's history).
LEGACY_WEIGHTS = 36
FROZEN_AT = "5ba6aedb69c76f2773ab1b25cc2557f409b8a55c"
WHAT_TO_DO = weights.NEW_WEIGHTS_RULE


def test_no_tracked_file_is_over_the_limit() -> None:
    sizes = {path: (ROOT / path).stat().st_size for path in weights.tracked_files(ROOT) if (ROOT / path).is_file()}
    over = {path: size for path, size in sizes.items() if size > MAX_TRACKED_BYTES}
    assert not over, f"tracked files over {MAX_TRACKED_BYTES / 2**20:.0f} MiB: {over}; {WHAT_TO_DO}"
    assert max(sizes.values()) > 10 * 2**20  # the shipped chemical LM is tracked and seen: the walk found the files


def test_weights_are_tracked_only_where_divrl_ships_them_or_as_listed_legacy_adapters() -> None:
    unlisted = weights.unlisted_weights(ROOT)
    assert not unlisted, f"weight files tracked outside {weights.SHIPPED_DIRS} and not in {weights.MANIFEST}: " \
                         f"{unlisted}; {WHAT_TO_DO}"
    assert "src/divrl/embedded/smiles-clm/model.safetensors" in weights.tracked_files(ROOT)


def test_the_legacy_adapter_list_only_shrinks() -> None:
    records = weights.read_manifest(ROOT)
    assert len(records) <= LEGACY_WEIGHTS, f"{weights.MANIFEST} grew past its {LEGACY_WEIGHTS} legacy adapters; " \
                                           f"{WHAT_TO_DO}"
    history = subprocess.run(["git", "-C", str(ROOT), "rev-list", FROZEN_AT], capture_output=True, text=True)
    if history.returncode != 0:
        pytest.skip(f"commit {FROZEN_AT[:12]} is not in this clone (a shallow clone lacks it)")
    frozen = set(history.stdout.split())
    later = [record.path for record in records if record.commit not in frozen]
    assert not later, f"{weights.MANIFEST} lists weights added after it was frozen: {later}; {WHAT_TO_DO}"


def test_the_manifest_matches_the_tracked_sizes() -> None:
    """Cheap against the tree (no hashing; `check`, run by the slow test below, compares the sha256 too)."""
    tracked = set(weights.tracked_files(ROOT))
    differ = [(r.path, r.size) for r in weights.read_manifest(ROOT)
              if r.path in tracked and (ROOT / r.path).is_file() and (ROOT / r.path).stat().st_size != r.size]
    assert not differ, f"{weights.MANIFEST} sizes differ from the tree: {differ}"


@pytest.mark.slow
def test_the_manifest_matches_the_tree_and_the_history() -> None:
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True).stdout.strip()
    if shallow == "true":
        pytest.skip("a shallow clone has no history to check the manifest against")
    assert weights.check(ROOT) == []


# ---------------------------------------------------------------------------- restore, on a throwaway repository
ADAPTER = "benchmarks/evidence/demo/sft/seed0/adapter_model.safetensors"


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def _repository_with_a_removed_adapter(repo: Path, content: bytes) -> None:
    """A git repository whose first commit added ADAPTER and whose second removed it, with its manifest row."""
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ADAPTER).parent.mkdir(parents=True)
    (repo / ADAPTER).write_bytes(content)
    _git(repo, "add", ADAPTER)
    _git(repo, "commit", "-q", "-m", "adapter")
    added = _git(repo, "rev-parse", "HEAD")
    (repo / weights.MANIFEST).write_text("\t".join(weights.COLUMNS) + "\n" + "\t".join(
        [ADAPTER, str(len(content)), hashlib.sha256(content).hexdigest(), added]) + "\n")
    _git(repo, "rm", "-q", ADAPTER)
    _git(repo, "add", weights.MANIFEST)
    _git(repo, "commit", "-q", "-m", "the adapter leaves the tree")


def test_restore_writes_a_removed_adapter_back_from_history(tmp_path: Path) -> None:
    repo, content = tmp_path / "repo", os.urandom(100_000)
    _repository_with_a_removed_adapter(repo, content)
    assert weights.check(repo) == []  # listed, not tracked: a removed adapter is what the manifest is for
    assert not (repo / ADAPTER).exists()

    assert weights.ensure_weight(repo / ADAPTER, root=repo) == repo / ADAPTER
    assert (repo / ADAPTER).read_bytes() == content
    assert weights.restore(root=repo) == []  # nothing missing any more
    outside = tmp_path / "elsewhere" / "adapter_model.safetensors"
    assert not weights.ensure_weight(outside, root=repo).exists()  # not listed: left alone


def test_restore_refuses_bytes_that_differ_from_the_recorded_sha256(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _repository_with_a_removed_adapter(repo, b"weights")
    manifest = repo / weights.MANIFEST
    row = manifest.read_text().splitlines()[1].split("\t")
    row[2] = hashlib.sha256(b"other weights").hexdigest()
    manifest.write_text("\t".join(weights.COLUMNS) + "\n" + "\t".join(row) + "\n")
    with pytest.raises(weights.WeightError, match="sha256"):
        weights.restore([ADAPTER], root=repo)
    assert not (repo / ADAPTER).exists()
    assert any("sha256" in problem for problem in weights.check(repo))


def test_restore_in_a_shallow_clone_says_how_to_get_the_history(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _repository_with_a_removed_adapter(repo, b"weights")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(clone)], check=True)
    with pytest.raises(weights.WeightError, match="--unshallow"):
        weights.restore([ADAPTER], root=clone)


def test_a_new_weight_file_is_reported_with_what_to_do(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _repository_with_a_removed_adapter(repo, b"weights")
    (repo / "runs").mkdir()
    (repo / "runs" / "model.pt").write_bytes(b"new weights")
    _git(repo, "add", "runs/model.pt")
    assert weights.unlisted_weights(repo) == ["runs/model.pt"]
    [problem] = weights.check(repo)
    assert problem.startswith("runs/model.pt: ") and weights.NEW_WEIGHTS_RULE in problem



def test_the_v4_driver_restores_a_missing_sft_adapter_before_merging_it(tmp_path: Path, monkeypatch) -> None:
    import molecules_v4 as v4

    import divrl.sft

    repo = tmp_path / "repo"
    _repository_with_a_removed_adapter(repo, b"weights")
    monkeypatch.setattr(v4, "STATE", repo / "benchmarks" / "evidence" / "demo")
    monkeypatch.setattr(v4, "ensure_weight", functools.partial(weights.ensure_weight, root=repo))
    monkeypatch.setattr(v4, "train_sft", lambda *args: pytest.fail("trained the warm start instead of restoring"))
    merged = []
    monkeypatch.setattr(divrl.sft, "merge_adapter", lambda kept, out, **settings: merged.append(kept))
    v4.warm_start(tmp_path / "work", 0, {"K": 1})
    assert merged == [(repo / ADAPTER).parent]
    assert (repo / ADAPTER).read_bytes() == b"weights"

@pytest.mark.parametrize("row, problem", [
    ("a.safetensors\t12\tnot-a-hash\t" + "0" * 40, "line 2"),
    ("../outside.pt\t1\t" + "0" * 64 + "\t" + "0" * 40, "not a path inside"),
])
def test_a_malformed_manifest_row_is_named(tmp_path: Path, row: str, problem: str) -> None:
    (tmp_path / weights.MANIFEST).parent.mkdir(parents=True)
    (tmp_path / weights.MANIFEST).write_text("\t".join(weights.COLUMNS) + "\n" + row + "\n")
    with pytest.raises(weights.WeightError, match=problem):
        weights.read_manifest(tmp_path)
