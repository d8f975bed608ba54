"""The demo's molecule phase: divrl's chemical LM (`embedded:smiles-clm`) on a PMO oracle at a small budget.

Three arms per seed, each spending the same oracle budget (`BUDGET` distinct valid molecules, PMO's way of counting):
sampling the prior, GRPO and IPS-GRPO, both trained with the chemical-LM recipes (full fine-tuning, 64 molecules a
step) behind a Murcko bucket-10 scaffold filter, the IPS paper's molecule setting. Yield@tau counts the distinct
molecules scoring above `TAU` within the budget; `TAU` is the prior's own 99th percentile on the oracle (measured by
`benchmarks/clm_prior.py`, results/clm_prior.json), so a hit is something sampling the prior rarely writes. The
report gives each arm's Yield per seed, the run read against the committed multi-seed result of the same settings
(`benchmarks/campaigns/demo_molecule_seeds.py`), and a Yield-against-calls figure with every seed drawn.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from divrl.shipped_recipes import RECIPES as SHIPPED_RECIPES
from divrl.tasks.molecules.metrics import generative_yield, yield_curve

RECIPES = SHIPPED_RECIPES / "smiles-clm-cpu" / "molecules"
OBJECTIVE = "albuterol_similarity"
TAU = 0.419  # the prior's p99 on albuterol_similarity (results/clm_prior.md, 2,000 distinct valid samples)
# 1,024 calls (16 steps of 64): at 256 (4 steps) GRPO's lead over sampling did not hold across seeds, at 1,024 it did
# (benchmarks/campaigns/demo_molecule_seeds.py: results/demo_molecule_seeds.md and evidence/demo_molecule_seeds/)
BUDGET = 1024
SEEDS = (0, 1)  # two of the committed ten, to keep the demo's time
ARMS = ("sample", "grpo", "ips")
FILTER = "diversity_filter={scaffold: murcko, bucket_size: 10}"
MAX_STEPS = 100  # a cap no arm reaches at this budget unless it collapses onto molecules it has already scored
PAIRS = (("grpo", "sample"), ("ips", "sample"), ("ips", "grpo"))  # the seed-paired differences the report reads
History = list[tuple[str, float]]


def settings() -> dict[str, Any]:
    """What fixes a seed's result here (with the seed): two runs compare only when these are equal."""
    return {"prior": "embedded:smiles-clm", "objective": OBJECTIVE, "tau": TAU, "budget": BUDGET, "filter": FILTER,
            "max_steps": MAX_STEPS, "arms": list(ARMS)}


def sample_prior(seed: int, budget: int) -> History:
    """Sample the prior 64 molecules at a time until `budget` oracle calls; the call history."""
    from divrl.models import load_model_and_tokenizer
    from divrl.tasks.molecules.pretrain import sample_smiles
    from divrl.tasks.molecules.task import MoleculeTask

    model, tokenizer = load_model_and_tokenizer("embedded:smiles-clm", quantize="none", cpu=True,
                                                log=lambda _: None)
    task = MoleculeTask(objective=OBJECTIVE)
    for batch in range(MAX_STEPS):
        task.scorer.score(sample_smiles(model, tokenizer, 64, seed=seed * 100_000 + batch, batch_size=64))
        if task.scorer.oracle_calls >= budget:
            break
    return [(call.smiles, call.score) for call in task.scorer.history[:budget]]


def train_arm(method: str, seed: int, out: Path, budget: int) -> History:
    """Train the chemical-LM recipe of `method` behind the scaffold filter until `budget` oracle calls; the call
    history (in memory: the run saves no checkpoint)."""
    from divrl.train import build_trainer, parse_recipe

    script_args, training_args, model_args = parse_recipe([
        "--config", str(RECIPES / f"{method}.yaml"), "--task_arg", f"objective={OBJECTIVE}", "--task_arg", FILTER,
        "--task_arg", f"oracle_budget={budget}", "--max_steps", str(MAX_STEPS), "--seed", str(seed),
        "--output_dir", str(out), "--save_strategy", "no", "--logging_steps", "1", "--console_log", "compact"])
    trainer = build_trainer(script_args, training_args, model_args)
    trainer.train()
    return [(call.smiles, call.score) for call in trainer.task.scorer.history[:budget]]


def run_seed(seed: int, out: Path, progress: Callable[[str], None] = print) -> dict[str, History]:
    """Every arm at `seed` (the trained arms' run folders under OUT/molecules); {arm: its oracle-call history}."""
    histories: dict[str, History] = {}
    for arm in ARMS:
        progress(f"molecules: {arm}, seed {seed}, until {BUDGET} oracle calls of {OBJECTIVE}")
        histories[arm] = (sample_prior(seed, BUDGET) if arm == "sample"
                          else train_arm(arm, seed, out / "molecules" / f"{arm}-seed{seed}", BUDGET))
    return histories


def run_phase(out: Path, seeds: tuple[int, ...] = SEEDS, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every arm on every seed; writes OUT/molecules.png and returns {"histories": {arm: {seed: history}}, "yield":
    {arm: [Yield@TAU per seed]}}."""
    by_seed = {seed: run_seed(seed, out, progress) for seed in seeds}
    histories = {arm: {seed: runs[arm] for seed, runs in by_seed.items()} for arm in ARMS}
    summary = {arm: [generative_yield(h, TAU) for h in runs.values()] for arm, runs in histories.items()}
    plot(histories, out / "molecules.png")
    return {"histories": histories, "yield": summary}


def plot(histories: dict[str, dict[int, History]], path: Path) -> None:
    """Yield@tau against oracle calls, one thin line per seed and a bold mean per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for color, (arm, runs) in zip(("tab:gray", "tab:blue", "tab:orange"), histories.items(), strict=False):
        curves = [yield_curve(h, TAU) for h in runs.values() if h]
        for curve in curves:
            axis.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.35, linewidth=0.8)
        length = min(len(c) for c in curves)
        mean = [statistics.mean(c[i] for c in curves) for i in range(length)]
        axis.plot(range(1, length + 1), mean, color=color, linewidth=2, label=arm)
    axis.set_xlabel("oracle calls (distinct valid molecules)")
    axis.set_ylabel(f"Yield: distinct molecules with {OBJECTIVE} > {TAU}")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report_lines(result: dict[str, Any], committed_path: Path | None = None) -> list[str]:
    """The report's section: the setting, each arm's Yield per seed, this run beside the committed multi-seed result
    at `committed_path` (when there is one for the same settings), and the figure."""
    seeds = list(result["histories"]["sample"])
    lines = ["## A chemical LM on a PMO oracle: prior sampling, GRPO and IPS-GRPO", "",
             f"`embedded:smiles-clm` (divrl's ~3M-parameter chemical LM, pretrained on MOSES) on PMO's `{OBJECTIVE}`, "
             f"{BUDGET} oracle calls per run (distinct valid molecules), GRPO and IPS-GRPO behind a Murcko bucket-10 "
             f"scaffold filter, 64 molecules a step, seeds {', '.join(map(str, seeds))}. "
             f"Yield: distinct molecules scoring above {TAU}, the prior's 99th percentile (results/clm_prior.md).", "",
             "| arm | Yield (mean) | per seed |", "|---|---|---|"]
    for arm, values in result["yield"].items():
        lines.append(f"| {arm} | {statistics.mean(values):.1f} | {', '.join(map(str, values))} |")
    lines += ["", *committed_lines(result["yield"], seeds, committed_path)]
    return lines + ["", "![Yield against oracle calls](molecules.png)"]


def committed_lines(yields: dict[str, list[int]], seeds: list[int], committed_path: Path | None) -> list[str]:
    """This run's Yield per arm and seed-paired differences beside the committed result's mean, Student-t interval
    over seeds and range, and the committed values of this run's seeds where it has them; a line saying why not where
    there is no readable committed result of these settings."""
    script = "`python benchmarks/campaigns/demo_molecule_seeds.py`"
    if committed_path is None or not committed_path.is_file():
        return [f"No committed multi-seed result to read this run against ({script} writes it)."]
    try:
        committed = json.loads(committed_path.read_text())
        if committed.get("settings") != settings():
            return [f"The committed multi-seed result ({committed_path.name}) is for other settings: {script} reruns "
                    "it."]
        shared = [seed for seed in seeds if seed in committed["seeds"]]
        lines = [f"Beside the same settings run with {len(committed['seeds'])} seeds by {script} (commit "
                 f"{committed['commit']}, {committed['date'][:10]}; this run's seeds {', '.join(map(str, seeds))}"
                 + (f", of which {', '.join(map(str, shared))} are among them and should repeat their committed "
                    "values on the same machine and thread count" if shared else "")
                 + "). Interval: Student-t 95% over seeds.", "",
                 "| Yield | this run (mean) | committed mean [95% t-interval] | committed range | "
                 "committed, this run's seeds |", "|---|---|---|---|---|"]
        rows = [(arm, yields[arm], committed["arms"][arm]) for arm in ARMS]
        rows += [(f"{a} - {b} (paired by seed)", [x - y for x, y in zip(yields[a], yields[b], strict=True)],
                  committed["paired"][f"{a} - {b}"]) for a, b in PAIRS]
        for label, mine, stat in rows:
            by_seed = dict(zip(committed["seeds"], stat["values"], strict=True))
            mine_by_seed = dict(zip(seeds, mine, strict=True))
            same = ", ".join(f"seed {seed}: {by_seed[seed]:g} (this run {mine_by_seed[seed]:g})" for seed in shared)
            lines.append(f"| {label} | {statistics.mean(mine):.2f} | {stat['mean']:.2f} [{stat['ci_low']:.2f}, "
                         f"{stat['ci_high']:.2f}] | {stat['min']:g} to {stat['max']:g} | {same or '-'} |")
    except (ValueError, KeyError, TypeError) as error:  # a JSON error is a ValueError
        return [f"The committed multi-seed result {committed_path} could not be read ({error!r}): {script} rewrites "
                "it."]
    return lines
