"""The quality-diversity law fit and the run plots, on synthetic trainer logs."""

import json
import warnings

import numpy as np
import pytest

from divrl.analysis.curves import curve_keys
from divrl.analysis.law import MIN_POINTS, fit_exponential_law, fit_run
from divrl.analysis.runs import load_log_history, metric_series
from divrl.cli import main


def write_run(path, n_points, a=0.4, b=1.5, c=3.0, c0=1.2, noise=0.0, seed=0):
    """A fake training output dir whose log obeys both laws exactly (plus optional noise)."""
    rng = np.random.default_rng(seed)
    diversity = np.linspace(0.9, 0.3, n_points)
    entropy = 2.0 * diversity + 0.1
    reward_d = -a * np.exp(c * diversity) + b + rng.normal(0, noise, n_points)
    history = [
        {"step": i + 1, "divrl/task_reward": float(reward_d[i]), "reward": 8 * float(reward_d[i]),  # IPS-like shaping
         "diversity/pairwise": float(diversity[i]),
         "entropy": float(entropy[i]), "ips/max_scale": 2.0 + i, "loss": 0.1}
        for i in range(n_points)
    ]
    history.append({"step": n_points, "train_runtime": 12.0})  # summary entry without metrics
    path.mkdir(parents=True, exist_ok=True)
    (path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return path


def test_fit_recovers_known_parameters():
    x = np.linspace(0.1, 1.0, 25)
    fit = fit_exponential_law(x, -0.5 * np.exp(2.0 * x) + 3.0, bootstrap=50)
    assert fit.c == pytest.approx(2.0, rel=1e-3)
    assert fit.a == pytest.approx(0.5, rel=1e-3) and fit.b == pytest.approx(3.0, rel=1e-3)
    assert fit.r2 == pytest.approx(1.0, abs=1e-6)
    assert fit.c_low == pytest.approx(2.0, rel=1e-4) and fit.c_high == pytest.approx(2.0, rel=1e-4)  # exact data


def test_fit_interval_widens_with_noise():
    x = np.linspace(0.1, 1.0, 40)
    y = -0.5 * np.exp(2.0 * x) + 3.0
    noisy = y + np.random.default_rng(1).normal(0, 0.05, x.size)
    clean_fit, noisy_fit = fit_exponential_law(x, y, bootstrap=200), fit_exponential_law(x, noisy, bootstrap=200)
    assert noisy_fit.c_high - noisy_fit.c_low > clean_fit.c_high - clean_fit.c_low
    assert noisy_fit.c_low < 2.0 < noisy_fit.c_high


def test_fit_rejects_too_few_points():
    with pytest.raises(ValueError, match=f"at least {MIN_POINTS}"):
        fit_exponential_law(np.arange(3.0), np.arange(3.0))


def test_fit_run_reads_logs_and_warns_on_too_few_points(tmp_path):
    run = write_run(tmp_path / "ips", 12)
    result = fit_run(run, "reward", "diversity/pairwise", "entropy", bootstrap=50)
    assert result["diversity"]["fit"]["c"] == pytest.approx(3.0, rel=1e-3)
    # entropy = 2 D + 0.1, so the entropy law has c0 = c / 2.
    assert result["entropy"]["fit"]["c"] == pytest.approx(1.5, rel=1e-3)
    short = write_run(tmp_path / "short", 3)
    with pytest.warns(UserWarning, match="only 3 logged points"):
        assert fit_run(short, "reward", "diversity/pairwise", "entropy")["diversity"]["fit"] is None


def test_log_history_from_latest_checkpoint(tmp_path):
    for step, n in ((5, 3), (20, 6)):
        write_run(tmp_path / "run" / f"checkpoint-{step}", n)
    history = load_log_history(tmp_path / "run")
    assert len(metric_series(history, "reward")) == 6
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_log_history(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        load_log_history(tmp_path)


def test_cli_fit_law_and_plot(tmp_path, capsys):
    runs = [str(write_run(tmp_path / name, 10, c=c, noise=0.002)) for name, c in (("grpo", 3.0), ("ips", 1.0))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["fit-law", *runs, "--bootstrap", "50", "--out", str(tmp_path / "law")]) == 0
    saved = json.loads((tmp_path / "law" / "law_fit.json").read_text())
    assert [r["diversity"]["fit"]["c"] for r in saved] == pytest.approx([3.0, 1.0], rel=0.1)
    assert [r["diversity"]["fit"]["b"] for r in saved] == pytest.approx([1.5, 1.5], rel=0.1)  # the task reward's b
    assert (tmp_path / "law" / "law_fit.png").stat().st_size > 0
    assert main(["plot", *runs, "--out", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "ips/max_scale" in capsys.readouterr().out


def test_curve_keys_order():
    keys = curve_keys([[{"step": 1, "qd/coverage": 0.1, "reward": 1.0, "entropy": 2.0, "loss": 0.3}]])
    assert keys == ["reward", "entropy", "qd/coverage"]


def test_cli_reports_unreadable_paths_without_a_traceback(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing"), "--out", str(tmp_path / "curves.png")]) == 2
    assert "divrl plot: error:" in capsys.readouterr().err
    run = str(write_run(tmp_path / "run", 10, c=1.0, noise=0.002))
    (tmp_path / "taken").write_text("a file where the output folder should go")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only the exit status matters here
        assert main(["fit-law", run, "--bootstrap", "5", "--out", str(tmp_path / "taken")]) == 2
    assert "divrl fit-law: error:" in capsys.readouterr().err
