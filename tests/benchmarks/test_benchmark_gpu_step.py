"""benchmarks/micro/gpu_step.py in its reduced CPU form: every path it asks for is run or reported with its reason, and
the results name the hardware."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "micro"))

import gpu_step  # noqa: E402


@pytest.mark.slow
def test_reduced_gpu_step_runs_on_the_cpu_and_says_where(tmp_path: Path) -> None:
    result = gpu_step.main(["--reduced", "--steps", "1", "--paths", "bf16", "nf4", "static-cache", "--methods", "grpo",
                            "ips", "--completions", "4", "--group", "4", "--max-tokens", "8", "--out", str(tmp_path)])
    rows = {(r["path"], r["method"]): r for r in result["rows"]}
    assert len(rows) == 6
    for method in ("grpo", "ips"):
        ran = rows[("bf16", method)]
        assert ran["dtype"] == "fp32" and ran["total"] > 0 and ran["completion_tokens"] > 0
        assert ran["generation"] + ran["scoring"] + ran["training"] == pytest.approx(ran["total"])
        assert "needs CUDA" in rows[("nf4", method)]["error"]
    assert result["recommended"] in ("bf16", "static-cache")
    text = (tmp_path / "gpu_step_reduced.md").read_text()
    assert "Measured on: **CPU" in text and "did not run: ValueError: 4-bit NF4 needs CUDA" in text
    assert json.loads((tmp_path / "gpu_step_reduced.json").read_text())["hardware"]["device"].startswith("CPU")


def test_real_shapes_are_the_published_blocks() -> None:
    qwen = gpu_step.SHAPES["qwen3-4b"]
    assert (qwen["hidden_size"], qwen["num_hidden_layers"], qwen["num_attention_heads"]) == (2560, 36, 32)
    with pytest.raises(ValueError, match="needs CUDA"):
        gpu_step.path_settings("nf4", cuda=False)
    assert gpu_step.path_settings("static-cache", cuda=True) == ("none", {"bf16": True,
                                                                        "cache_implementation": "static"})
