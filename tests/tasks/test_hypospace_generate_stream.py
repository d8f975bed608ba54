"""`divrl hypospace generate` streams instances to the JSONL instead of building them all first (issue 14 item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from divrl.cli import main
from divrl.tasks.hypospace import make_task, write_jsonl
from divrl.tasks.hypospace.cli import stream_split
from divrl.tasks.hypospace.common import HypoSpaceTask

VOXEL = ["--domain", "voxel", "--grid", "2", "--max-height", "2", "--max-blocks", "3"]
SPLITS = [[], ["--split", "train"], ["--split", "test", "--seed", "3"], ["--split", "all", "--limit", "5"],
          ["--split", "train", "--limit", "7", "--test-fraction", "0.3"]]


def _forbid_materialising(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building every instance in memory (the cached `_instances`) fails the command."""

    def materialised(self: HypoSpaceTask) -> tuple:
        raise AssertionError("all instances were built in memory")

    monkeypatch.setattr(HypoSpaceTask, "_instances", property(materialised))


@pytest.mark.parametrize("options", SPLITS, ids=lambda o: " ".join(o) or "all")
def test_generate_streams_the_same_file_as_the_in_memory_split(
    options: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    task = make_task("voxel", grid=2, max_height=2, max_blocks=3)
    values = {"--split": "all", "--seed": "0", "--test-fraction": "0.5", "--limit": None}
    values.update(dict(zip(options[::2], options[1::2], strict=True)))
    expected = task.split(values["--split"], int(values["--seed"]), float(values["--test-fraction"]),
                          None if values["--limit"] is None else int(values["--limit"]))
    write_jsonl(expected, tmp_path / "expected.jsonl")
    _forbid_materialising(monkeypatch)
    assert main(["hypospace", "generate", *VOXEL, *options, "--out", str(tmp_path / "out.jsonl")]) == 0
    assert (tmp_path / "out.jsonl").read_text() == (tmp_path / "expected.jsonl").read_text()
    assert f"wrote {len(expected)} observation sets" in capsys.readouterr().out
    assert not list(tmp_path.glob(".*partial"))


def test_stream_split_holds_one_instance_at_a_time() -> None:
    """The stream is lazy: each instance is written before the enumeration goes further."""
    expected = make_task("voxel", grid=2, max_height=2, max_blocks=3).instances()
    task = make_task("voxel", grid=2, max_height=2, max_blocks=3)
    produced = []

    def counting_enumerate():
        for item in type(task).enumerate(task):
            produced.append(item)
            yield item

    task.enumerate = counting_enumerate  # type: ignore[method-assign]
    stream = stream_split(task, "all")
    assert next(stream) == expected[0] and len(produced) == 1
    assert next(stream) == expected[1] and len(produced) == 2
    assert list(stream) == expected[2:] and len(produced) == len(expected)


def test_an_empty_split_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("kept\n")
    argv = ["hypospace", "generate", *VOXEL, "--split", "test", "--test-fraction", "0", "--out", str(out)]
    assert main(argv) == 2
    assert "is empty" in capsys.readouterr().err and out.read_text() == "kept\n"
    assert not list(tmp_path.glob(".*partial"))
