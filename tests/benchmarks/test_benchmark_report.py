"""BENCHMARKS.md assembly: known fragments in reading order, a partial rerun's fragment right after its full run's
and told apart by its results file, unknown fragments last."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import report  # noqa: E402


def _write(results: Path, stem: str, title: str) -> None:
    (results / f"{stem}.md").write_text(f"## {title}\n\nbody of {stem}\n")


def test_variants_follow_their_benchmark_and_repeated_titles_name_their_file(tmp_path: Path) -> None:
    _write(tmp_path, "zzz_other", "Other")
    _write(tmp_path, "trainer_overhead_recheck", "Overhead")
    _write(tmp_path, "population_overhead", "Population")
    _write(tmp_path, "trainer_overhead", "Overhead")
    _write(tmp_path, "demo", "Demo")
    _write(tmp_path, "hypospace_recovery_v2", "Recovery v2")
    _write(tmp_path, "hypospace_recovery", "Recovery v1")
    titles = [line for line in report.assemble(tmp_path).splitlines() if line.startswith("## ")]
    assert titles == ["## Demo", "## Overhead", "## Overhead: `results/trainer_overhead_recheck.md`", "## Population",
                      "## Recovery v2", "## Recovery v1", "## Other"]


def test_every_fragment_body_is_kept(tmp_path: Path) -> None:
    for stem in ("toy", "trainer_overhead", "trainer_overhead_klcov"):
        _write(tmp_path, stem, "Same title")
    text = report.assemble(tmp_path)
    assert all(f"body of {stem}" in text for stem in ("toy", "trainer_overhead", "trainer_overhead_klcov"))


def test_no_fragments(tmp_path: Path) -> None:
    assert "No benchmark results yet." in report.assemble(tmp_path)


def test_superseded_fragments_go_to_the_history_page_only(tmp_path: Path) -> None:
    _write(tmp_path, "trainer_overhead", "Overhead")
    _write(tmp_path, "trainer_overhead_issue30", "Overhead before and after")
    _write(tmp_path, "trainer_overhead_issue30_idle1", "Overhead before and after")
    current, history = report.assemble(tmp_path), report.assemble_history(tmp_path)
    assert "body of trainer_overhead\n" in current and "issue30" not in current.split("\n## ", 1)[1]
    assert "body of trainer_overhead_issue30\n" in history and "body of trainer_overhead_issue30_idle1" in history
    assert "body of trainer_overhead\n" not in history
    assert all(f"`{prefix}*`" in history for prefix in report.SUPERSEDED)  # each group says why it was replaced


def test_committed_benchmarks_and_history_are_what_the_generator_writes() -> None:
    """BENCHMARKS.md and the history page are regenerated, never hand-edited: both match the committed fragments."""
    assert (report.REPOSITORY / "BENCHMARKS.md").read_text() == report.assemble()
    assert (report.REPOSITORY / "docs" / "benchmarks-history.md").read_text() == report.assemble_history()
