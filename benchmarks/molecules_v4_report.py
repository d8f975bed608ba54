"""Evidence v4's report (`python benchmarks/molecules_v4.py report`): per-seed measures, per-arm means, differences
paired by seed with Student-t intervals, the target verdict per IPS arm, the Yield figure and the quality-diversity
law fits, from the units in the state folder. Whatever has landed is reported, with how many seeds each number rests
on. Then the corrections of issue 58, all read from the committed oracle-call histories (nothing is rerun): the
deviations from the protocol, labelled; Yield with the copies of SFT targets removed; #Circles in call order beside
the protocol's sorted-SMILES order; distinct Murcko scaffolds of the hits; and every comparison at equal calls."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from intervals import t_interval
from molecules_v4 import CIRCLE_DISTANCE, budget_measures

from divrl.tasks.molecules.metrics import yield_curve

PRIMARY = ("yield", "oracle_burden", "circles", "intdiv")
ARM_ORDER = ("sample", "grpo", "ips", "grpo+df", "ips+df", "fkl", "qd", "pop", "maxent")
TARGET = {"ips": ("grpo", "sample"), "ips+df": ("grpo+df", "sample")}
PLANNED_SEEDS = 5
# The law's quality is the task reward before the methods' shaping, comparable across arms (under the diversity filter,
# which wraps the reward function, the filtered one): the logged `reward` is IPS's reward times the inverse group
# frequency (v5's decisions.md, 2026-12-02)
LAW_KEYS = ("divrl/task_reward", "diversity/pairwise")


def load_units(state: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """arm -> seed -> metrics.json of every landed unit."""
    units: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(state.glob("units/*/metrics.json")):
        metrics = json.loads(path.read_text())
        units.setdefault(metrics["arm"], {})[metrics["seed"]] = metrics
    return units


def burden_interval(values: list[float | None]) -> dict[str, Any]:
    """Oracle Burden as the protocol reads it: "not reached: reported as > B, and the interval is then not computed".
    With any seed that never found 100 hits (None), the interval is empty (n = 0) and `not_reached` counts those
    seeds; `reached_seeds_only` keeps the interval over the other seeds, which v4's first report printed: a
    deviation, labelled wherever it is shown."""
    reached = [v for v in values if v is not None]
    missing = len(values) - len(reached)
    if not missing:
        return {**t_interval(reached), "not_reached": 0}
    return {**t_interval([]), "not_reached": missing, "reached_seeds_only": t_interval(reached)}


def paired(units: dict[str, dict[int, dict[str, Any]]], arm: str, reference: str, measure: str) -> dict[str, Any]:
    """`arm` - `reference` on `measure`, paired by the seeds both have (None values drop that seed; for Oracle
    Burden they leave no interval, `burden_interval`)."""
    seeds = sorted(set(units.get(arm, {})) & set(units.get(reference, {})))
    pairs = [(units[arm][s][measure], units[reference][s][measure]) for s in seeds]
    differences = [None if a is None or b is None else a - b for a, b in pairs]
    if measure == "oracle_burden":
        return {**burden_interval(differences), "seeds": seeds}
    return {**t_interval([d for d in differences if d is not None]), "seeds": seeds}


def arm_summaries(units: dict[str, dict[int, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per arm, each primary measure's mean and Student-t interval over its seeds (Oracle Burden only where every
    seed reached 100 hits, `burden_interval`), how many runs stopped short of B, and the fresh samples' mean
    uniqueness."""
    out = {}
    for arm in (a for a in ARM_ORDER if a in units):
        seeds = units[arm]
        out[arm] = {**{m: t_interval([u[m] for u in seeds.values() if u[m] is not None]) for m in PRIMARY},
                    "oracle_burden": burden_interval([u["oracle_burden"] for u in seeds.values()]),
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


def load_history(state: Path, arm: str, seed: int) -> list[tuple[str, float]]:
    """A unit's committed oracle-call history, (canonical SMILES, score) in call order."""
    rows = (json.loads(line) for line in (state / "units" / f"{arm}-seed{seed}" / "history.jsonl").read_text()
            .splitlines())
    return [(row["smiles"], row["score"]) for row in rows]


def law_fits(state: Path, units: dict[str, dict[int, dict[str, Any]]], reward_key: str = LAW_KEYS[0]) -> dict[str, Any]:
    """R = -a exp(c D) + b over each RL unit's logged steps (`reward_key` against diversity/pairwise): per seed, per
    arm (points pooled) and over every arm at once."""
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
            points = [(d, r) for _, r, d in metric_series(load_log_history(log), reward_key, LAW_KEYS[1])]
            per_seed[seed] = fit(points)
            arm_points += points
        if per_seed:
            per_arm[arm] = {"seeds": per_seed, "pooled": fit(arm_points)}
            everything += arm_points
    pooled_r2 = [f["pooled"]["r2"] for f in per_arm.values() if f["pooled"]]
    return {"arms": per_arm, "all_arms": fit(everything),
            "mean_per_arm_r2": float(np.mean(pooled_r2)) if pooled_r2 else None}


def plot_seed_curves(ax: Any, curves: list[tuple[list[int], int]], color: str, label: str) -> None:
    """Each seed's Yield curve (with its budget) thin, dotted from where a run stopped short to its budget, and their
    mean bold, labelled `label` with the number of seeds."""
    held = []
    for curve, budget in curves:
        ax.plot(range(1, len(curve) + 1), curve, color=color, linewidth=0.6, alpha=0.5)
        if len(curve) < budget:
            ax.plot([len(curve), budget], [curve[-1]] * 2, color=color, linewidth=0.6, alpha=0.5, ls=":")
            curve = curve + [curve[-1]] * (budget - len(curve))
        held.append(curve)
    ax.plot(range(1, len(held[0]) + 1), np.mean(held, axis=0), color=color, linewidth=2,
            label=f"{label} ({len(held)} seed{'s' if len(held) > 1 else ''})")


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
        curves = [(yield_curve(load_history(state, arm, seed)[: metrics["B"]], metrics["tau"]), metrics["B"])
                  for seed, metrics in sorted(units[arm].items())]
        plot_seed_curves(ax, curves, color, arm)
    ax.set(xlabel="oracle calls", ylabel="distinct molecules with MPO > tau (Yield)",
           title="Evidence v4: Yield against oracle calls (thin: seeds, dotted after a stop; bold: mean)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ issue 58
def circles_in_order(smiles: list[str], threshold: float = CIRCLE_DISTANCE) -> int:
    """#Circles with the greedy pass in the order given (call order here), where
    `divrl.tasks.molecules.metrics.circles` goes in sorted canonical-SMILES order; same fingerprints (2048-bit
    Morgan r2) and the same rule: a molecule is picked when it is more than `threshold` from every one picked."""
    from rdkit import Chem, DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    picked: list = []
    for canonical in dict.fromkeys(smiles):
        fingerprint = generator.GetFingerprint(Chem.MolFromSmiles(canonical))
        if all(1.0 - t > threshold for t in DataStructs.BulkTanimotoSimilarity(fingerprint, picked)):
            picked.append(fingerprint)
    return len(picked)


def sft_data() -> dict[str, Any]:
    """What the warm start was trained on (`data.sft_targets`, unchanged since the campaign commit), by source file,
    and how many shipped WEHI molecules the few-shot exclusion removed."""
    from divrl.tasks.molecules.data import few_shot_pool, sft_targets, shipped_smiles

    targets = set(sft_targets())
    sources = {name: targets & set(shipped_smiles(name)) for name in ("nci", "wehi", "chembl")}
    return {"targets": targets, "size": len(targets), "by_source": {k: len(v) for k, v in sources.items()},
            "nci_or_wehi": len(sources["nci"] | sources["wehi"]),
            "only_chembl": len(sources["chembl"] - sources["nci"] - sources["wehi"]),
            "excluded_few_shot_pool": len(few_shot_pool())}


def history_commits(state: Path) -> dict[str, Any] | None:
    """When each unit's history.jsonl was first committed, against its metrics.json (`git log` of this checkout; None
    outside one). The protocol commits each history with its unit."""
    try:
        log = subprocess.run(["git", "-C", str(state), "log", "--diff-filter=A", "--format=@%h %ct", "--name-only",
                              "--relative", "--", "units"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    added: dict[tuple[str, str], tuple[str, int]] = {}  # (unit, file) -> (commit, time) of its first add
    commit = ("", 0)
    for line in log.splitlines():  # newest commit first, so the last one seen is the first add
        if line.startswith("@"):
            sha, seconds = line[1:].split()
            commit = (sha, int(seconds))
        elif line.count("/") == 2 and line.rsplit("/", 1)[1] in ("history.jsonl", "metrics.json"):
            added[tuple(line.split("/")[1:])] = commit
    units = sorted({unit for unit, _ in added if {(unit, "metrics.json"), (unit, "history.jsonl")} <= added.keys()})
    if not units:
        return None
    lag = {u: (added[u, "history.jsonl"][1] - added[u, "metrics.json"][1]) / 3600 for u in units}
    batches: dict[str, int] = {}
    for u in units:
        batches[added[u, "history.jsonl"][0]] = batches.get(added[u, "history.jsonl"][0], 0) + 1
    largest = max(batches, key=lambda sha: batches[sha])
    return {"units": len(units), "late": sum(h > 0 for h in lag.values()), "max_lag_hours": max(0.0, *lag.values()),
            "largest_batch": largest, "largest_batch_histories": batches[largest]}


def corrections(state: Path, units: dict[str, dict[int, dict[str, Any]]],
                rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 58's additions, from the committed histories: per unit, whether the history gives back its committed
    measures, the hits that copy an SFT target and the Yield without them, #Circles in call order and the hits'
    distinct Murcko scaffolds; per arm and paired by seed as the primary measures are; and each comparison of
    `rows` at equal calls, C = the fewest calls any run of its two arms made, with the same seed-level intervals."""
    from rdkit import Chem

    from divrl.tasks.molecules.diversity_filter import scaffold_of

    sft = sft_data()
    histories = {arm: {seed: load_history(state, arm, seed) for seed in seeds} for arm, seeds in units.items()}
    per_unit: dict[str, dict[int, dict[str, Any]]] = {}
    for arm, seeds in units.items():
        for seed, metrics in seeds.items():
            calls = histories[arm][seed][: metrics["B"]]
            hits = list(dict.fromkeys(s for s, v in calls if v > metrics["tau"]))  # call order of first finding
            again = budget_measures(histories[arm][seed], metrics["B"], metrics["tau"])
            copies = sum(h in sft["targets"] for h in hits)
            per_unit.setdefault(arm, {})[seed] = {
                "reproduces_metrics": all(again[k] == metrics[k] for k in again), "sft_copies": copies,
                "novel_yield": len(hits) - copies, "sft_copy_fraction": copies / len(hits) if hits else 0.0,
                "circles_call_order": circles_in_order(hits),
                "murcko_scaffolds": len({scaffold_of(Chem.MolFromSmiles(h)) for h in hits})}
    measures = ("novel_yield", "circles_call_order", "murcko_scaffolds", "sft_copy_fraction")
    arms = {arm: {m: t_interval([u[m] for u in per_unit[arm].values()]) for m in measures}
            for arm in ARM_ORDER if arm in per_unit}
    differences = [{"arm": r["arm"], "reference": r["reference"],
                    **{m: paired(per_unit, r["arm"], r["reference"], m) for m in measures[:3]}} for r in rows]
    equal_calls = []
    for r in rows:
        pair = (r["arm"], r["reference"])
        c = min(m["calls"] for a in pair for m in units[a].values())
        at_c = {a: {s: budget_measures(histories[a][s], c, units[a][s]["tau"]) for s in units[a]} for a in pair}
        equal_calls.append({"arm": r["arm"], "reference": r["reference"], "C": c,
                            **{m: paired(at_c, *pair, m) for m in ("yield", "circles")}})
    all_units = [m for seeds in units.values() for m in seeds.values()]
    print(f"issue 58: {sum(u['reproduces_metrics'] for s in per_unit.values() for u in s.values())} of "
          f"{len(all_units)} committed histories give back their unit's committed measures")
    return {"sft_data": {k: v for k, v in sft.items() if k != "targets"}, "history_commits": history_commits(state),
            "stopped_short": sum(m["stopped_short"] for m in all_units), "runs": len(all_units),
            "units": {a: {str(s): u for s, u in seeds.items()} for a, seeds in per_unit.items()},
            "arms": arms, "paired": differences, "equal_calls": equal_calls}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) and not float(value).is_integer() else f"{value:g}"


def _number(value: float, sign: str) -> str:
    """Three significant digits, but a value of 1,000 or more as a whole number with separators, not 3.9e+03."""
    return f"{value:{sign},.0f}" if abs(value) >= 1000 else f"{value:{sign}.3g}"


def _interval(stat: dict[str, Any], difference: bool = True) -> str:
    """'mean [low, high] (n seeds)': signed with its seed count for a paired difference, plain for a level."""
    sign = "+" if difference else ""
    if stat["n"] == 0:
        return "no shared seed" if difference else "-"
    if math.isnan(stat["ci_low"]):
        return f"{_number(stat['mean'], sign)} (1 seed, no interval)"
    count = f" ({stat['n']} seeds)" if difference else ""
    return (f"{_number(stat['mean'], sign)} [{_number(stat['ci_low'], sign)}, {_number(stat['ci_high'], sign)}]"
            f"{count}")


def _burden(stat: dict[str, Any], seeds: int, difference: bool = True) -> str:
    """An Oracle Burden cell: the interval, or, where a seed never reached 100 hits, the protocol's "> B" with the
    reached-seeds interval of v4's first report labelled as the deviation it is."""
    if not stat.get("not_reached"):
        return _interval(stat, difference)
    cell = f"> B on {stat['not_reached']} of {seeds} seeds: no interval (protocol)"
    if stat["reached_seeds_only"]["n"]:
        cell += f"; deviation, over the seeds that reached 100: {_interval(stat['reached_seeds_only'], difference)}"
    return cell


def _fresh_distinct(fresh: dict[str, Any]) -> int:
    """Distinct valid molecules among the fresh samples (uniqueness is distinct valid / valid)."""
    return round(fresh["uniqueness"] * fresh["validity"] * fresh["samples"])


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
    lines += ["", "### Per arm (mean over seeds, Student-t 95% interval; OB only where every seed reached 100 hits)",
              "",
              "| arm | seeds | Yield@tau | OB_tau(100) | #Circles of hits | IntDiv of hits | stopped short | "
              "fresh uniqueness |", "|---|---|---|---|---|---|---|---|"]
    for arm, summary in result["arms"].items():
        n = len(summary["seeds"])
        cells = [_burden(summary[m], n, difference=False) if m == "oracle_burden" else
                 _interval(summary[m], difference=False) for m in PRIMARY]
        lines.append(f"| {arm} | {n} | " + " | ".join(cells) + f" | {summary['stopped_short']} of {n} | "
                     f"{summary['fresh_uniqueness']:.3f} |")
    lines += ["", "### Differences paired by seed (mean, Student-t 95% interval, df = seeds - 1)", "",
              "| comparison | Yield@tau | #Circles | IntDiv | OB_tau(100) |", "|---|---|---|---|---|"]
    for row in result["paired"]:
        lines.append(f"| {row['arm']} - {row['reference']} | " + " | ".join(
            _interval(row[m]) for m in ("yield", "circles", "intdiv"))
            + f" | {_burden(row['oracle_burden'], len(row['oracle_burden']['seeds']))} |")
    lines += ["", "### Target (stated in the protocol before any unit)", ""]
    for arm, verdict in result["verdicts"].items():
        state = {True: "REACHED", False: "NOT reached", None: "not yet decidable"}[verdict["reached"]]
        label = "" if verdict["final"] else f" (provisional: {verdict['seeds']} of {PLANNED_SEEDS} seeds)"
        checks = "; ".join(f"{name}: {_interval(stat)}" for name, stat in verdict["checks"].items())
        lines.append(f"- **{arm}: {state}**{label}. {checks}.")
    lines += ["", "### Secondary: the final policy's fresh samples (256 on the evaluation prompts, a fresh cache)", "",
              "| arm | seed | validity | mean MPO (valid) | uniqueness (of valid) | distinct valid | "
              "#Circles above tau |", "|---|---|---|---|---|---|---|"]
    for arm in arms:
        for seed, m in sorted(units[arm].items()):
            f = m["fresh"]
            lines.append(f"| {arm} | {seed} | {f['validity']:.3f} | {_cell(f['mean_mpo_valid'])} | "
                         f"{f['uniqueness']:.3f} | {_fresh_distinct(f)} | {f['circles_above_tau']} |")
    laws = result["law"]
    lines += ["", "### Quality-diversity law R = -a exp(c D) + b over each RL run's logged steps (the task reward "
                  "before shaping against diversity/pairwise; corrected, see below)", "",
              "| arm | pooled R^2 | c | points | per-seed R^2 |", "|---|---|---|---|---|"]
    for arm, fits in laws["arms"].items():
        pooled = fits["pooled"]
        seeds = ", ".join(f"{s}: {_cell(f['r2']) if f else '-'}" for s, f in fits["seeds"].items())
        lines.append(f"| {arm} | {_cell(pooled['r2']) if pooled else '-'} | {_cell(pooled['c']) if pooled else '-'} | "
                     f"{pooled['points'] if pooled else 0} | {seeds} |")
    if laws["all_arms"]:
        lines += ["", f"One law over every RL run: R^2 {laws['all_arms']['r2']:.3f}, against a mean per-arm R^2 of "
                      f"{laws['mean_per_arm_r2']:.3f}."]
    if "corrections" in result:
        lines += corrections_markdown(settings, units, result["corrections"])
    return "\n".join(lines) + "\n"


def corrections_markdown(settings: dict[str, Any], units: dict[str, dict[int, dict[str, Any]]],
                         fix: dict[str, Any]) -> list[str]:
    """Issue 58's section: the deviations, labelled, and the measures added from the committed histories."""
    sft, commits = fix["sft_data"], fix["history_commits"]
    by = sft["by_source"]
    sample_short = [(s, m) for s, m in sorted(units.get("sample", {}).items()) if m["stopped_short"]]
    lines = ["", "### Corrections (issue 58, 2026-11-28): deviations and measures added from the committed histories",
             "", "Nothing was rerun: every number below is read from the committed oracle-call histories (and, for the "
             "SFT data, from the shipped files `divrl.tasks.molecules.data.sft_targets` reads, unchanged since the "
             f"campaign commit). {sum(u['reproduces_metrics'] for s in fix['units'].values() for u in s.values())} of "
             f"{fix['runs']} histories give back their unit's committed measures exactly.", "",
             "Deviations from the protocol (each is a deviation wherever its numbers appear):",
             "- SFT data: the protocol named the shipped WEHI and NCI files; the targets also held rdkit's ChEMBL "
             f"file. The SFT set is {sft['size']:,} molecules: {by['nci']:,} NCI, {by['wehi']} WEHI and "
             f"{by['chembl']:,} ChEMBL ({sft['only_chembl']:,} in no other file). `decisions.md` (00:22 UTC) called "
             f"the {sft['size']:,} \"the gate-passing NCI molecules plus the 85 WEHI molecules outside the pool\", "
             f"which are {sft['nci_or_wehi']:,}.",
             "- SFT exclusion (decided before any result): every molecule of the few-shot pool "
             f"({sft['excluded_few_shot_pool']:,} WEHI molecules) was left out of the SFT targets, not only the "
             "campaign prompts' examples.",
             f"- Sample cap (decided before any unit's result): warm-start sampling drew at most S_max = "
             f"{settings.get('S_max')} chunks of 32, the RL arms' cap, not the protocol's 2 B samples"
             + ("; at that cap " + ", ".join(f"seed {s} stopped at {m['calls']} calls" for s, m in sample_short)
                if sample_short else "") + ".",
             "- Oracle Burden: the first report gave OB intervals over the seeds that reached 100 hits; the protocol "
             "says no interval is computed when a seed did not. The tables above now follow the protocol and show the "
             "earlier interval labelled.",
             f"- Budget: {fix['stopped_short']} of {fix['runs']} runs stopped short of B (the protocol's step or "
             "sample cap), so not every run spent the same budget; Yield at B credits each with the calls it made. The "
             "equal-calls table below compares at a budget every run reached."]
    first = fix.get("law_first_report")
    if first:
        lines.append("- Quality-diversity law (corrected 2026-12-02): the first report fitted the logged `reward`, "
                     "which for the IPS arms is up to 8 times the task reward (the inverse frequency in a group of 8; "
                     "the other arms' equals it), so one pooled fit mixed scales: it gave R^2 "
                     f"{first['all_arms']['r2']:.3f} against a mean per-arm R^2 of {first['mean_per_arm_r2']:.3f}. "
                     "The law table above now fits `divrl/task_reward`, logged alike for every arm.")
    if commits:
        lines.append(f"- Histories committed late: the protocol commits each history with its unit; "
                     f"{commits['largest_batch_histories']} of the {commits['units']} came in one commit "
                     f"({commits['largest_batch']}), and {commits['late']} histories were committed after their "
                     f"unit's measures, up to {commits['max_lag_hours']:.1f} hours later (`git log` of this checkout); "
                     "the histories give back every committed measure (above).")
    lines += ["", "Per seed: hits that copy an SFT target, Yield without them (novel Yield), #Circles in sorted-SMILES "
              "order (the protocol's, as above) and in call order, and the hits' distinct Bemis-Murcko scaffolds "
              "(the diversity filter's `murcko`; acyclic hits share one empty scaffold). #Circles is sphere exclusion "
              f"on 2048-bit Morgan fingerprints at Tanimoto distance {CIRCLE_DISTANCE}, not a scaffold count.", "",
              "| arm | seed | Yield@tau | SFT copies | novel Yield | #Circles (sorted) | #Circles (call order) | "
              "Murcko scaffolds | history gives back measures |", "|---|---|---|---|---|---|---|---|---|"]
    for arm in (a for a in ARM_ORDER if a in units):
        for seed, m in sorted(units[arm].items()):
            u = fix["units"][arm][str(seed)]
            lines.append(f"| {arm} | {seed} | {m['yield']} | {u['sft_copies']} | {u['novel_yield']} | {m['circles']} | "
                         f"{u['circles_call_order']} | {u['murcko_scaffolds']} | "
                         f"{'yes' if u['reproduces_metrics'] else 'NO'} |")
    lines += ["", "Per arm (mean, Student-t 95% interval over seeds):", "",
              "| arm | SFT copies, fraction of hits | novel Yield | #Circles (call order) | Murcko scaffolds |",
              "|---|---|---|---|---|"]
    for arm, a in fix["arms"].items():
        lines.append(f"| {arm} | " + " | ".join(_interval(a[m], difference=False) for m in
                     ("sft_copy_fraction", "novel_yield", "circles_call_order", "murcko_scaffolds")) + " |")
    lines += ["", "Paired by seed (mean, Student-t 95% interval, df = seeds - 1):", "",
              "| comparison | novel Yield | #Circles (call order) | Murcko scaffolds |", "|---|---|---|---|"]
    for row in fix["paired"]:
        lines.append(f"| {row['arm']} - {row['reference']} | " + " | ".join(
            _interval(row[m]) for m in ("novel_yield", "circles_call_order", "murcko_scaffolds")) + " |")
    lines += ["", "At equal calls: each arm's Yield@tau and #Circles (sorted) over its first C calls, C the fewest "
              "calls any run of the two arms made, paired by seed with the same intervals:", "",
              "| comparison | C | Yield@tau at C | #Circles at C |", "|---|---|---|---|"]
    for row in fix["equal_calls"]:
        lines.append(f"| {row['arm']} - {row['reference']} | {row['C']} | {_interval(row['yield'])} | "
                     f"{_interval(row['circles'])} |")
    return lines


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
              "arms": arm_summaries(units), "paired": rows, "verdicts": verdicts(units), "law": law_fits(state, units),
              "corrections": {**corrections(state, units, rows),
                              "law_first_report": law_fits(state, units, reward_key="reward")}}
    results.mkdir(parents=True, exist_ok=True)
    (results / "molecules_v4.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (results / "molecules_v4.md").write_text(markdown(settings, units, result))
    if units:
        figure(state, units, results / "molecules_v4_yield.png")
    print((results / "molecules_v4.md").read_text())
    return result
