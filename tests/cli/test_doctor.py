"""`divrl doctor` on the CPU: versions, devices, 2 training steps per method, one table, and an exit code that says
whether everything that should run here ran."""

from __future__ import annotations

import re

import pytest

from divrl import doctor
from divrl.cli import main
from divrl.methods import REGISTRY


def test_every_registered_method_has_a_check() -> None:
    cases = doctor.method_cases()
    assert set(cases) == {"grpo"} | (set(REGISTRY) - {"outcome_keys"})  # outcome_keys is IPS's own setting
    assert all(cases[name] for name in cases if name != "grpo")


@pytest.mark.slow
def test_doctor_trains_each_method_and_ends_with_the_table(capsys: pytest.CaptureFixture) -> None:
    assert main(["doctor", "--methods", "grpo", "ips", "qd"]) == 0
    out = capsys.readouterr().out
    for package in doctor.PACKAGES:
        assert f"  {package} " in out
    assert "no CUDA device" in out
    for name in ("grpo", "ips", "qd"):
        assert re.search(rf"train {name} \(fp32\) +ok: 2 steps, loss", out)
    assert out.rstrip().endswith("3 passed, 0 failed")
    assert all(out.count(f"train {name} (fp32)") == 1 for name in ("grpo", "ips", "qd"))  # the table, printed once
    assert "{'loss'" not in out  # no Trainer log dicts between the lines


def test_a_failing_check_is_one_line_and_exit_1(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                                ) -> None:
    def broken(model_dir, out, settings, precision):
        if settings.get("ips"):
            raise RuntimeError("kernel\nexploded")
        return "2 steps, loss 0.1000"

    monkeypatch.setattr(doctor, "train_two_steps", broken)
    assert main(["doctor", "--methods", "grpo", "ips"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"train grpo \(fp32\) +ok: 2 steps", out)
    assert re.search(r"train ips \(fp32\) +FAILED: RuntimeError: kernel exploded \(test_doctor.py:\d+\)\n", out)
    assert out.rstrip().endswith("1 passed, 1 failed")
    assert out.count("train grpo (fp32)") == out.count("train ips (fp32)") == out.count("check ") == 1  # one table


def test_an_unknown_method_is_named(capsys: pytest.CaptureFixture) -> None:
    assert main(["doctor", "--methods", "ipss"]) == 2
    assert "unknown method(s) ['ipss']" in capsys.readouterr().err
