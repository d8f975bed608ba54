"""Evidence v4's report (`python benchmarks/molecules_v4.py report`): per-seed measures, per-arm means, differences
paired by seed with Student-t intervals, the target verdict per IPS arm, the Yield figure and the quality-diversity
law fits, from the units in the state folder. Whatever has landed is reported, with how many seeds each number rests
on."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from hypospace_recovery import t_interval

from divrl.tasks.molecules.metrics import yield_curve

PRIMARY = ("yield", "oracle_burden", "circles", "intdiv")
ARM_ORDER = ("sample", "grpo", "ips", "grpo+df", "ips+df", "fkl", "qd", "pop", "maxent")
TARGET = {"ips": ("grpo", "sample"), "ips+df": ("grpo+df", "sample")}
PLANNED_SEEDS = 5


def load_units(state: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> seed -> metrics.json of every landed unit."""
    units: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(state.glob("units/*/metrics.json")):
        metrics = json.loads(path.read_text())
        units.setdefault(metrics["arm"], {})[metrics["seed"]] = metrics
    return units


def paired(units: dict[str, dict[int, dict[str, Any]]], arm: str, reference: str, measure: str) -> dict[str, Any]:
    """`arm` - `reference` on `measure`, paired by the seeds both have (None values drop that seed)."""
    seeds = sorted(set(units.get(arm, {})) & set(units.get(reference, {})))
    values = [units[arm][s][measure] - units[reference][s][measure] for s in seeds
              if units[arm][s][measure] is not None and units[reference][s][measure] is not None]
    return {**t_interval(values), "seeds": seeds}


def arm_summaries(units: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per arm, each primary measure's mean and Student-t interval over its seeds (Oracle Burden over the seeds that
    reached 100 hits), how many runs stopped short of B, and the fresh samples' mean uniqueness."""
    out = {}
    for arm in (a for a in ARM_ORDER if a in units):
        seeds = units[arm]
        out[arm] = {**{m: t_interval([u[m] for u in seeds.values() if u[m] is not None]) for m in PRIMARY},
                    "stopped_short": sum(u["stopped_short"] for u in seeds.values()), "seeds": sorted(seeds),
                    "fresh_uniqueness": float(np.mean([u["fresh"]["uniqueness"] for u in seeds.values()]))}
    return out


def verdicts(units: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The protocol's target per IPS arm: Yield above GRPO's (same filter) and above sampling, intervals excluding
    0, and #Circles of the hits not detectably below GRPO's; provisional below 5 seeds."""
    out = {}
    for arm, (grpo, sample) in TARGET.items():
        checks = {f"yield > {grpo}": paired(units, arm, grpo, "yield"),
                  f"yield > {sample}": paired(units, arm, sample, "yield"),
                  f"circles not below {grpo}": paired(units, arm, grpo, "circles")}
        yields_ok = all(c["ci_low"] > 0 for name, c in checks.items() if name.startswith("yield"))
        circles = checks[f"circles not below {grpo}"]
        reached = yields_ok and not circles["ci_high"] < 0
        seeds = min(c["n"] for c in checks.values())
        out[arm] = {"checks": checks, "reached": reached if seeds >= 2 else None, "seeds": seeds,
                    "final": seeds >= PLANNED_SEEDS}
    return out


def law_fits(state: Path, units: dict[str, dict[int, dict[str, Any]]]) -> dict[str, Any]:
    """R = -a exp(c D) + b over each RL unit's logged steps (reward vs diversity/pairwise): per seed, per arm
    (points pooled) and over every arm at once."""
    from divrl.analysis.law import MIN_POINTS, fit_exponential_law
    from divrl.analysis.runs import load_log_history, metric_series

    def fit(points: list[tuple[float, float]]) -> dict[str, Any] | None:
        if len(points) < MIN_POINTS:
            return None
        x, y = np.array([p[0] for p in points]), np.array([p[1] for p in points])
        law = fit_exponential_law(x, y, bootstrap=200)
        return {"a": law.a, "b": law.b, "c": law.c, "r2": law.r2, "points": law.num_points}

    per_arm, everything = {}, []
    for arm, seeds in units.items():
        arm_points, per_seed = [], {}
        for seed in seeds:
            log = state / "units" / f"{arm}-seed{seed}"
            if not (log / "trainer_state.json").is_file():
                continue
            points = [(d, r) for _, r, d in metric_series(load_log_history(log), "reward", "diversity/pairwise")]
            per_seed[seed] = fit(points)
            arm_points += points
        if per_seed:
            per_arm[arm] = {"seeds": per_seed, "pooled": fit(arm_points)}
            everything += arm_points
    pooled_r2 = [f["pooled"]["r2"] for f in per_arm.values() if f["pooled"]]
    return {"arms": per_arm, "all_arms": fit(everything),
            "mean_per_arm_r2": float(np.mean(pooled_r2)) if pooled_r2 else None}


def figure(state: Path, units: dict[str, dict[int, dict[str, Any]]], path: Path) -> None:
    """Yield@tau against oracle calls per arm, one thin line per seed and the mean over seeds bold. A run that stopped
    short of B keeps the hits it had when it stopped (the protocol's reading), drawn dotted from there to B, so each
    bold line ends at the mean of the table's Yield@tau."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for index, arm in enumerate(a for a in ARM_ORDER if a in units):
        color = f"C{index}"
        curves = []
        for seed, metrics in sorted(units[arm].items()):
            history = [(json.loads(line)["smiles"], json.loads(line)["score"]) for line in
                       (state / "units" / f"{arm}-seed{seed}" / "history.jsonl").read_text().splitlines()]
            curve = yield_curve(history[: metrics["B"]], metrics["tau"])
            ax.plot(range(1, len(curve) + 1), curve, color=color, linewidth=0.6, alpha=0.5)
            if len(curve) < metrics["B"]:
                ax.plot([len(curve), metrics["B"]], [curve[-1]] * 2, color=color, linewidth=0.6, alpha=0.5, ls=":")
                curve = curve + [curve[-1]] * (metrics["B"] - len(curve))
            curves.append(curve)
        ax.plot(range(1, len(curves[0]) + 1), np.mean(curves, axis=0), color=color, linewidth=2,
                label=f"{arm} ({len(curves)} seed{'s' if len(curves) > 1 else ''})")
    ax.set(xlabel="oracle calls", ylabel="distinct molecules with MPO > tau (Yield)",
           title="Evidence v4: Yield against oracle calls (thin: seeds, dotted after a stop; bold: mean)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) and not float(value).is_integer() else f"{value:g}"


def _interval(stat: dict[str, Any], difference: bool = True) -> str:
    """'mean [low, high] (n seeds)': signed with its seed count for a paired difference, plain for a level."""
    sign = "+" if difference else ""
    if stat["n"] == 0:
        return "no shared seed" if difference else "-"
    if math.isnan(stat["ci_low"]):
        return f"{stat['mean']:{sign}.3g} (1 seed, no interval)"
    count = f" ({stat['n']} seeds)" if difference else ""
    return f"{stat['mean']:{sign}.3g} [{stat['ci_low']:{sign}.3g}, {stat['ci_high']:{sign}.3g}]{count}"


def markdown(settings: dict[str, Any], units: dict[str, dict[int, dict[str, Any]]], result: dict[str, Any]) -> str:
    """The report's text: settings, per-seed table, per-arm means, paired differences, verdicts, fresh samples, law
    fits."""
    arms = [a for a in ARM_ORDER if a in units]
    lines = ["## Evidence v4: molecules under a fixed oracle budget (`benchmarks/molecules_v4.py`)", "",
             f"Protocol: `benchmarks/evidence/molecules_v4/protocol.md`. Warm start: SFT K = {settings.get('K')} "
             f"steps; "
             f"tau = {settings.get('tau')}; B = {settings.get('B')} oracle calls; step cap S_max = "
             f"{settings.get('S_max')}. Units landed: "
             + ", ".join(f"{a} {len(units[a])}/{PLANNED_SEEDS}" for a in arms) + ".", "",
             "### Per seed (primary, over each run's oracle-call history)", "",
             "| arm | seed | Yield@tau | OB_tau(100) | #Circles of hits | IntDiv of hits | calls | Yield@0.9 |",
             "|---|---|---|---|---|---|---|---|"]
    for arm in arms:
        for seed, m in sorted(units[arm].items()):
            short = " (stopped short)" if m["stopped_short"] else ""
            lines.append(f"| {arm} | {seed} | {m['yield']} | {_cell(m['oracle_burden'])} | {m['circles']} | "
                         f"{_cell(m['intdiv'])} | {m['calls']}{short} | {m['yield_tau2']} |")
    lines += ["", "### Per arm (mean over seeds, Student-t 95% interval; OB over the seeds that reached 100 hits)", "",
              "| arm | seeds | Yield@tau | OB_tau(100) | #Circles of hits | IntDiv of hits | stopped short | "
              "fresh uniqueness |", "|---|---|---|---|---|---|---|---|"]
    for arm, summary in result["arms"].items():
        n = len(summary["seeds"])
        lines.append(f"| {arm} | {n} | " + " | ".join(_interval(summary[m], difference=False) for m in PRIMARY)
                     + f" | {summary['stopped_short']} of {n} | {summary['fresh_uniqueness']:.3f} |")
    lines += ["", "### Differences paired by seed (mean, Student-t 95% interval, df = seeds - 1)", "",
              "| comparison | Yield@tau | #Circles | IntDiv |", "|---|---|---|---|"]
    for row in result["paired"]:
        lines.append(f"| {row['arm']} - {row['reference']} | " + " | ".join(
            _interval(row[m]) for m in ("yield", "circles", "intdiv")) + " |")
    lines += ["", "### Target (stated in the protocol before any unit)", ""]
    for arm, verdict in result["verdicts"].items():
        state = {True: "REACHED", False: "NOT reached", None: "not yet decidable"}[verdict["reached"]]
        label = "" if verdict["final"] else f" (provisional: {verdict['seeds']} of {PLANNED_SEEDS} seeds)"
        checks = "; ".join(f"{name}: {_interval(stat)}" for name, stat in verdict["checks"].items())
        lines.append(f"- **{arm}: {state}**{label}. {checks}.")
    lines += ["", "### Secondary: the final policy's fresh samples (256 on the evaluation prompts, a fresh cache)", "",
              "| arm | seed | validity | mean MPO (valid) | uniqueness | #Circles above tau |",
              "|---|---|---|---|---|---|"]
    for arm in arms:
        for seed, m in sorted(units[arm].items()):
            f = m["fresh"]
            lines.append(f"| {arm} | {seed} | {f['validity']:.3f} | {_cell(f['mean_mpo_valid'])} | "
                         f"{f['uniqueness']:.3f} | {f['circles_above_tau']} |")
    laws = result["law"]
    lines += ["", "### Quality-diversity law R = -a exp(c D) + b over each RL run's logged steps", "",
              "| arm | pooled R^2 | c | points | per-seed R^2 |", "|---|---|---|---|---|"]
    for arm, fits in laws["arms"].items():
        pooled = fits["pooled"]
        seeds = ", ".join(f"{s}: {_cell(f['r2']) if f else '-'}" for s, f in fits["seeds"].items())
        lines.append(f"| {arm} | {_cell(pooled['r2']) if pooled else '-'} | {_cell(pooled['c']) if pooled else '-'} | "
                     f"{pooled['points'] if pooled else 0} | {seeds} |")
    if laws["all_arms"]:
        lines += ["", f"One law over every RL run: R^2 {laws['all_arms']['r2']:.3f}, against a mean per-arm R^2 of "
                      f"{laws['mean_per_arm_r2']:.3f}."]
    return "\n".join(lines) + "\n"


def write_report(state: Path, results: Path) -> dict[str, Any]:
    """Compute everything from the landed units and write results/molecules_v4.{json,md,png}."""
    settings = {**json.loads((state / "pilots" / "warm_start.json").read_text()),
                **json.loads((state / "pilots" / "budget.json").read_text())}
    units = load_units(state)
    rows = []
    for arm in (a for a in ARM_ORDER if a in units and a != "sample"):  # sampling is a reference, not a compared arm
        for reference in ("grpo+df" if arm.endswith("+df") and arm != "grpo+df" else "grpo", "sample"):
            if arm != reference and reference in units:
                rows.append({"arm": arm, "reference": reference,
                             **{m: paired(units, arm, reference, m) for m in PRIMARY}})
    result = {"settings": settings, "units": {a: {str(s): m for s, m in seeds.items()} for a, seeds in units.items()},
              "arms": arm_summaries(units), "paired": rows, "verdicts": verdicts(units), "law": law_fits(state, units)}
    results.mkdir(parents=True, exist_ok=True)
    (results / "molecules_v4.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (results / "molecules_v4.md").write_text(markdown(settings, units, result))
    if units:
        figure(state, units, results / "molecules_v4_yield.png")
    print((results / "molecules_v4.md").read_text())
    return result
