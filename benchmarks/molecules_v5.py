"""Evidence v5 (issue 58): the IPS paper's molecule comparison with a chemical LM prior at the field's budget.

Runs `benchmarks/evidence/molecules_v5/protocol.md` as written: the tau pilot, then units (one oracle, one arm, one
seed) that each leave their oracle-call journal, trainer log and measures in the state folder, dealt seed by seed to
two lanes, then the report (the REINVENT anchor first, the paper's claim, divrl's question, a verdict per arm, the
quality-diversity law and the Yield figure), from the committed files alone.

    python benchmarks/molecules_v5.py pilot-tau                         # tau1, tau2 and oracle time per oracle
    python benchmarks/molecules_v5.py unit ranolazine_mpo ips-replay 0  # one unit, resumable
    python benchmarks/molecules_v5.py lane 0                            # lane 0's units, finished ones skipped
    python benchmarks/molecules_v5.py report                            # results/molecules_v5.{md,json,png}

Checkpoints stay in --work (default ../v5-work beside the checkout). --budget, --max-steps and --samples depart from
the protocol: they are refused unless --test is passed too, are recorded in what they write, and the report leaves
such units out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from bisect import bisect_right
from collections.abc import Container, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from molecules_v4 import CIRCLE_DISTANCE, divrl, log, read_json, write_json
from molecules_v4_report import LAW_KEYS  # the task reward, not IPS's 64x nor MaxEnt's and QD's bonuses

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / "benchmarks" / "evidence" / "molecules_v5"
RESULTS = ROOT / "benchmarks" / "results"
RECIPES = Path("recipes") / "smiles-clm-cpu" / "molecules"  # relative to the checkout the unit runs from

# Fixed by the protocol.
PRIOR = "embedded:smiles-clm"
PRIOR_SHA256 = "b20db11eeb3a315041eb5e85a9219a794344bebc6f22908bda7bba5a8bc26bcf"
BUDGET = 10_000  # B, oracle calls
BATCH = 64  # molecules a step
MAX_STEPS = math.ceil(2 * BUDGET / BATCH)  # S_max = 313; prior sampling: 2 B samples, whole steps of 64
MAX_TOKENS = 100
LEARNING_RATE = "1e-4"
SAVE_STEPS = 25
PILOT_SAMPLES, PILOT_SEED = 10_000, 1000
ORACLE_SECONDS = 0.010  # an oracle must take less per molecule, else the next in rank replaces it
# The oracle rule's ranking (most headroom first) with PMO's published REINVENT AUC top-10 (docs/pmo.md).
RANKED_ORACLES = {"ranolazine_mpo": 0.760, "celecoxib_rediscovery": 0.713, "thiothixene_rediscovery": 0.534,
                  "mestranol_similarity": 0.618}
ANCHOR_MARGIN = 0.15
OB_N = 100
CURVE_EVERY = 100  # calls between the points of the curves (AUC top-10 samples at the same rate)
MAIN_SEEDS, EXTRA_SEEDS = 5, 3
LAW_BOOTSTRAP = 1000
TAUS = ("tau1", "tau2")
VERDICT_MEASURES = ("novel_yield_tau1", "circles_tau1", "auc_top10")  # each arm against arms 4 and 1
CURVE_VERDICT_MEASURES = VERDICT_MEASURES[:2]  # those with curves against calls: the comparison at equal calls


class Arm(NamedTuple):
    """One arm: its number in the protocol, recipe (None: prior sampling), filter and extra `divrl train` flags."""

    number: int
    name: str
    recipe: str | None
    filtered: bool
    extra: tuple[str, ...] = ()

    @property
    def seeds(self) -> int:
        """Seeds 0..4 for arms 1-6, 0..2 for arms 7-11."""
        return MAIN_SEEDS if self.number <= 6 else EXTRA_SEEDS

    def oracles(self, chosen: Sequence[str]) -> Sequence[str]:
        """Both oracles for arms 1-6, oracle 1 for arms 7-11."""
        return chosen if self.number <= 6 else chosen[:1]


ARMS = {arm.name: arm for arm in (
    Arm(1, "prior", None, False),
    Arm(2, "reinvent-replay", "reinvent-replay.yaml", True),
    Arm(3, "ips-replay", "ips-replay.yaml", True),
    Arm(4, "grpo-filter", "grpo.yaml", True),
    Arm(5, "ips-filter", "ips.yaml", True),
    Arm(6, "grpo", "grpo.yaml", False),
    Arm(7, "qd-filter", "qd.yaml", True),
    Arm(8, "pop4-filter", "pop.yaml", True, ("--population_size", "4")),
    Arm(9, "maxent-filter", "maxent.yaml", True),
    Arm(10, "sgrpo-filter", "set-diversity.yaml", True),
    Arm(11, "fkl-filter", "fkl.yaml", True, ("--divergence_estimator", "rehearsal")),
)}
REHEARSAL_SAMPLES = 256  # arm 11's rehearsal set: prior samples of the unit's seed, the valid ones kept (decisions.md)
Unit = tuple[str, str, int]  # (oracle, arm, seed)
History = list[tuple[str, float]]


# ------------------------------------------------------------------------------------------------ the campaign
def campaign_units(chosen: Sequence[str]) -> list[Unit]:
    """The 75 units seed by seed (all seed-0 units first), arms in protocol order, each arm's oracles in turn."""
    return [(oracle, arm.name, seed) for seed in range(MAIN_SEEDS) for arm in ARMS.values() if seed < arm.seeds
            for oracle in arm.oracles(chosen)]


def lane_units(chosen: Sequence[str], lane: int) -> list[Unit]:
    """Lane `lane`'s units: the campaign's order dealt alternately to lanes 0 and 1."""
    if lane not in (0, 1):
        raise SystemExit(f"molecules_v5: there are two lanes, 0 and 1; got {lane}")
    return campaign_units(chosen)[lane::2]


def unit_dir(state: Path, unit: Unit) -> Path:
    """Where a unit's committed files go: STATE/units/ORACLE/ARM/seedS."""
    oracle, arm, seed = unit
    return state / "units" / oracle / arm / f"seed{seed}"


def checked_deviations(values: dict[str, Any], test: bool) -> dict[str, Any]:
    """The given test-only settings (those not None); refused without --test, so none enters campaign results."""
    given = {name: value for name, value in values.items() if value is not None}
    if given and not test:
        flags = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in given.items())
        raise SystemExit(f"molecules_v5: {flags} departs from the protocol; pass --test as well (test runs are "
                         "labelled and never count as campaign results)")
    return given


def check_prior() -> None:
    """Refuse a prior whose weights are not the ones the protocol fixes by sha256."""
    from divrl.models import resolve_model_name
    from divrl.tasks.molecules.moses import sha256_file

    found = sha256_file(Path(resolve_model_name(PRIOR)) / "model.safetensors")
    if found != PRIOR_SHA256:
        raise SystemExit(f"molecules_v5: {PRIOR}'s weights have sha256 {found}, not the protocol's {PRIOR_SHA256}")


def code_commit() -> dict[str, Any]:
    """The commit of the code running (`git rev-parse HEAD` of this checkout) and whether tracked files differ."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout

    return {"commit": git("rev-parse", "HEAD").strip(),
            "commit_clean": not git("status", "--porcelain", "--untracked-files=no").strip()}


# ------------------------------------------------------------------------------------------------ the prior
def prior_sampler(seed: int) -> Any:
    """The shipped prior sampled as the RL arms sample it: from the empty (BOS) prompt, temperature 1, no top-k or
    top-p cut, at most 100 tokens, 64 to a generate call; `seed` starts the stream."""
    from divrl.sampling import SamplingConfig, make_sampler

    config = SamplingConfig(max_new_tokens=MAX_TOKENS, temperature=1.0, batch_size=BATCH, seed=seed)
    return make_sampler(PRIOR, config, quantize="none", dtype="float32")


def prior_molecules(sampler: Any, count: int) -> list[str | None]:
    """`count` samples read as the task reads a chemical LM's completion (canonical SMILES, None when invalid)."""
    from divrl.tasks.molecules.chem import answer_smiles
    from divrl.tasks.molecules.data import CLM_PROMPT

    return [answer_smiles(text, CLM_PROMPT) for text in sampler([CLM_PROMPT], count)[0]]


def round_up(value: float) -> float:
    """`value` rounded up to a multiple of 0.01 (a value already on one stays)."""
    return math.ceil(round(value * 100, 6)) / 100


def pilot_tau(state: Path, samples: int = PILOT_SAMPLES, deviations: dict[str, Any] | None = None) -> dict[str, Any]:
    """The tau pilot: prior samples at seed 1000; per oracle in rank order, until two are under 10 ms a molecule, the
    99th and 99.9th percentiles over the distinct valid samples (tau1, tau2: rounded up to 0.01) and its time."""
    import numpy as np

    from divrl.tasks.molecules.pmo import PMOOracle

    path = state / "pilots" / "tau.json"
    if path.is_file():
        recorded = read_json(path)
        if bool(recorded.get("test")) != bool(deviations):
            raise SystemExit(f"molecules_v5: {path} holds a {'test' if recorded.get('test') else 'campaign'} pilot; "
                             "move it away first")
        return recorded
    check_prior()
    began = time.time()
    distinct = [s for s in dict.fromkeys(prior_molecules(prior_sampler(PILOT_SEED), samples)) if s is not None]
    oracles: dict[str, dict[str, Any]] = {}
    chosen: list[str] = []
    for name in RANKED_ORACLES:
        if len(chosen) == 2:
            break
        oracle = PMOOracle(name)
        started = time.perf_counter()
        scores = np.array([oracle(s) for s in distinct])
        seconds = (time.perf_counter() - started) / len(distinct)
        p99, p999 = (float(p) for p in np.percentile(scores, [99, 99.9]))
        oracles[name] = {"p99": p99, "p99.9": p999, "tau1": round_up(p99), "tau2": round_up(p999),
                         "seconds_per_molecule": seconds, "fast_enough": seconds < ORACLE_SECONDS}
        if seconds < ORACLE_SECONDS:
            chosen.append(name)
        log(f"pilot-tau {name}: {oracles[name]}")
    result = {"samples": samples, "seed": PILOT_SEED, "temperature": 1.0, "max_tokens": MAX_TOKENS,
              "distinct_valid": len(distinct), "oracles": oracles, "chosen": chosen,
              "seconds": time.time() - began, "threads": os.environ.get("OMP_NUM_THREADS"), **code_commit(),
              **({"test": True, "deviations": deviations} if deviations else {})}
    write_json(path, result)
    return result


def settings(state: Path, test: bool = False) -> dict[str, Any]:
    """The tau pilot's record, which every unit needs; a test pilot only serves --test units."""
    path = state / "pilots" / "tau.json"
    if not path.is_file():
        raise SystemExit(f"molecules_v5: no {path}: run `pilot-tau` first")
    pilot = read_json(path)
    if pilot.get("test") and not test:
        raise SystemExit(f"molecules_v5: {path} is a test pilot ({pilot['deviations']}); campaign units need the real "
                         "one")
    if len(pilot["chosen"]) != 2:
        raise SystemExit(f"molecules_v5: the tau pilot found {len(pilot['chosen'])} oracles under 10 ms, not 2")
    return pilot


def sample_prior(run: Path, objective: str, seed: int, budget: int, max_steps: int) -> int:
    """Arm 1: sample the prior 64 a step from seed `seed` until `budget` calls or `max_steps` steps, every call
    journaled to RUN/oracle_calls.jsonl; a rerun draws the same molecules and pays none of them twice. The steps."""
    from divrl.task import JOURNAL_FILE
    from divrl.tasks.molecules import MoleculeTask

    run.mkdir(parents=True, exist_ok=True)
    task = MoleculeTask(objective=objective, oracle_budget=budget)
    task.scorer.attach_journal(run / JOURNAL_FILE, fresh=False)
    sampler = prior_sampler(seed)
    steps = 0
    while steps < max_steps and task.stop_reason() is None:
        task.scorer.score(prior_molecules(sampler, BATCH))
        steps += 1
        if steps % 25 == 0:
            log(f"prior {objective} seed {seed}: {steps} steps, {task.scorer.oracle_calls} calls")
    task.scorer.close_journal()
    return steps


# ------------------------------------------------------------------------------------------------ RL units
def train_args(run: Path, objective: str, arm: Arm, seed: int, budget: int, max_steps: int, tau1: float,
               resume: bool) -> list[str]:
    """`divrl train` of an RL arm: its recipe with the protocol's settings and overrides."""
    filtered = ["--task_arg", f"diversity_filter={{scaffold: murcko, bucket_size: 10, min_score: {tau1}}}"]
    return ["train", str(RECIPES / str(arm.recipe)), "--output_dir", str(run), "--seed", str(seed),
            "--model_name_or_path", PRIOR, "--learning_rate", LEARNING_RATE, "--per_device_train_batch_size",
            str(BATCH), "--num_generations", str(BATCH), "--max_completion_length", str(MAX_TOKENS),
            "--temperature", "1.0", "--max_steps", str(max_steps), "--save_strategy", "steps", "--save_steps",
            str(SAVE_STEPS), "--logging_steps", "1", "--console_log", "compact",
            "--task_arg", f"objective={objective}", "--task_arg", f"oracle_budget={budget}",
            *(filtered if arm.filtered else []), *arm.extra, *(["--resume_from_checkpoint", "true"] if resume else [])]


def rehearsal_set(run: Path, objective: str, seed: int) -> Path:
    """Arm 11's rehearsal set, made as v4's forward-KL arm made it but from the prior: REHEARSAL_SAMPLES prior samples
    (seed `seed`), the valid molecules kept; their oracle calls go to SET/history.jsonl, where the unit's history, and
    so its budget, starts. Beside the run's folder (which holds only the run); made once."""
    from divrl.models import load_model_and_tokenizer
    from divrl.tasks.molecules import MoleculeTask
    from divrl.tasks.molecules.chem import answer_smiles
    from divrl.tasks.molecules.data import CLM_PROMPT
    from divrl.tasks.molecules.scoring import write_history
    from divrl.trainers.rehearsal import sample_reference

    out = run.with_name(f"{run.name}-rehearsal")
    if (out / "history.jsonl").is_file():
        return out
    task = MoleculeTask(objective=objective)
    model, tokenizer = load_model_and_tokenizer(PRIOR, quantize="none", dtype="float32", cpu=True)

    def valid(index: int, text: str) -> float:
        smiles = answer_smiles(text, CLM_PROMPT)
        task.scorer.score([smiles])  # every valid sample is an oracle call of the unit
        return float(smiles is not None)

    sample_reference(model, tokenizer, [CLM_PROMPT], out, num_samples=REHEARSAL_SAMPLES, max_new_tokens=MAX_TOKENS,
                     temperature=1.0, batch_size=BATCH, seed=seed, score=valid, correct_only=True)
    write_history(out / "history.jsonl", task.scorer.history)
    return out


def holds_run(run: Path) -> bool:
    """Whether a unit's work folder holds an earlier attempt (a checkpoint, or a journal with calls in it)."""
    from divrl.task import JOURNAL_FILE

    journal = run / JOURNAL_FILE
    return any(run.glob("checkpoint-*")) or (journal.is_file() and journal.stat().st_size > 0)


# ------------------------------------------------------------------------------------------------ measures
def gate_hits(history: History, tau: float) -> History:
    """`history` with the score of every molecule above `tau` that v4's chemistry gate rejects set to 0, so that the
    metrics' functions count only hits (a degenerate molecule that scores is not a discovery)."""
    from divrl.tasks.molecules.chem import parse_smiles
    from divrl.tasks.molecules.sanity import ChemistryGate

    gate = ChemistryGate()
    return [(s, v if v <= tau or gate.rejection(parse_smiles(s)) is None else 0.0) for s, v in history]


def curve_points(calls: int) -> list[int]:
    """The calls at which curves are read: every 100 and the last."""
    return sorted({*range(CURVE_EVERY, calls + 1, CURVE_EVERY), calls} - {0})


def unit_measures(history: History, budget: int, tau1: float, tau2: float, novel_against: Container[str]
                  ) -> dict[str, Any]:
    """Every protocol measure over the first `budget` calls of a unit's history, at tau1 and tau2, with curves
    against calls: AUC top-10 (PMO's scores, held to B when short), Yield and novel Yield (hits absent from
    `novel_against`, MOSES train), OB_tau(100) (B + 1 when not reached), #Circles of the hits in call order,
    distinct Murcko scaffolds and IntDiv of the hits."""
    from molecules_v4_report import circles_in_order

    from divrl.tasks.molecules.chem import parse_smiles
    from divrl.tasks.molecules.diversity_filter import scaffold_of
    from divrl.tasks.molecules.metrics import auc_top_k, generative_yield, intdiv_moses, oracle_burden, yield_curve

    calls = history[:budget]
    gated = gate_hits(calls, min(tau1, tau2))
    novel = [(s, 0.0 if s in novel_against else v) for s, v in gated]
    points = curve_points(len(calls))
    measures: dict[str, Any] = {"calls": len(calls), "auc_top10": auc_top_k(calls, budget),
                                "gate_rejected_above_tau1": sum(a != b for a, b in zip(calls, gated, strict=True))}
    curves: dict[str, list[int]] = {"calls": points}
    for label, tau in zip(TAUS, (tau1, tau2), strict=True):
        found_at = [call for call, (_, v) in enumerate(gated, 1) if v > tau]
        hits = [s for s, v in gated if v > tau]
        upto = [bisect_right(found_at, point) for point in points]  # hits within the first `point` calls
        circles = {n: circles_in_order(hits[:n], CIRCLE_DISTANCE) for n in {*upto, len(hits)}}
        burden = oracle_burden(gated, tau, OB_N)
        yields, novels = yield_curve(gated, tau), yield_curve(novel, tau)
        measures |= {f"yield_{label}": generative_yield(gated, tau),
                     f"novel_yield_{label}": generative_yield(novel, tau),
                     f"ob{OB_N}_{label}": budget + 1 if burden is None else burden,
                     f"ob{OB_N}_{label}_reached": burden is not None, f"circles_{label}": circles[len(hits)],
                     f"scaffolds_{label}": len({scaffold_of(parse_smiles(h)) for h in hits}),
                     f"intdiv_{label}": intdiv_moses(hits, p=1)}
        curves |= {f"yield_{label}": [yields[p - 1] for p in points],
                   f"novel_yield_{label}": [novels[p - 1] for p in points],
                   f"circles_{label}": [circles[n] for n in upto]}
    return {**measures, "curves": curves}


@lru_cache(maxsize=1)
def moses_train() -> frozenset[str]:
    """MOSES train as canonical SMILES (canonicalised once and cached by `clm_prior`), for novel Yield."""
    from clm_prior import _cached_canonical

    return frozenset(_cached_canonical("train"))


def run_unit(state: Path, work: Path, unit: Unit, budget: int = BUDGET, max_steps: int = MAX_STEPS,
             deviations: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One unit: sample or train (resuming an earlier attempt), then its measures, journal and trainer log into the
    state folder, metrics.json last (what marks it finished); None when it had finished already. Its wall time is
    this attempt's (`resumed` says whether an earlier one ran)."""
    from divrl.task import JOURNAL_FILE
    from divrl.tasks.molecules.scoring import read_history

    oracle, name, seed = unit
    out, run, arm = unit_dir(state, unit), work / oracle / name / f"seed{seed}", ARMS[name]
    if (out / "metrics.json").is_file():
        log(f"unit {oracle} {name} seed {seed}: finished already")
        return None
    pilot = settings(state, test=bool(deviations))
    if unit not in campaign_units(pilot["chosen"]):
        raise SystemExit(f"molecules_v5: ({oracle}, {name}, seed {seed}) is not one of the protocol's 75 units")
    check_prior()
    tau1, tau2 = (pilot["oracles"][oracle][label] for label in TAUS)
    resumed = holds_run(run)
    log(f"unit {oracle} {name} seed {seed}: B={budget}, tau1={tau1}, tau2={tau2}" + (" (resuming)" if resumed else ""))
    began = time.time()
    if arm.recipe is None:
        steps, command = sample_prior(run, oracle, seed, budget, max_steps), None
    else:
        command = train_args(run, oracle, arm, seed, budget, max_steps, tau1, resumed)
        if "rehearsal" in arm.extra:
            rehearsal = rehearsal_set(run, oracle, seed)
            command += ["--divergence_rehearsal_path", str(rehearsal),
                        "--task_arg", f"oracle_history={rehearsal / 'history.jsonl'}"]
        divrl(*command)
        steps = read_json(run / "trainer_state.json")["global_step"]
    history = [(call.smiles, call.score) for call in read_history(run / JOURNAL_FILE)]
    measures = unit_measures(history, budget, tau1, tau2, moses_train())
    out.mkdir(parents=True, exist_ok=True)
    for kept in (JOURNAL_FILE, "trainer_state.json"):
        if (run / kept).is_file():
            shutil.copy2(run / kept, out / kept)
    metrics = {"oracle": oracle, "arm": name, "arm_number": arm.number, "seed": seed, "budget": budget,
               "max_steps": max_steps, "tau1": tau1, "tau2": tau2, "steps": steps, "journal_calls": len(history),
               "stopped_short": measures["calls"] < budget, **measures, **code_commit(),
               "wall_seconds": time.time() - began, "resumed": resumed, "command": command,
               "threads": os.environ.get("OMP_NUM_THREADS"),
               **({"test": True, "deviations": deviations} if deviations else {})}
    write_json(out / "metrics.json", metrics)
    log(f"unit {oracle} {name} seed {seed} done: {measures['calls']} calls, Yield@tau1 {measures['yield_tau1']}")
    return metrics


# ------------------------------------------------------------------------------------------------ report
def campaign_commit(state: Path) -> str:
    """The commit every unit must run from: the last 'Campaign commit: `SHA`' line of decisions.md (as
    `benchmarks/pinned_worktree.sh` reads it)."""
    path = state / "decisions.md"
    recorded = re.findall(r"Campaign commit: `([0-9a-f]{7,40})`", path.read_text()) if path.is_file() else []
    if not recorded:
        raise SystemExit(f"molecules_v5: no line 'Campaign commit: `SHA`' in {path}")
    return recorded[-1]


def load_units(state: Path) -> tuple[dict[str, dict[str, dict[int, dict[str, Any]]]], list[str]]:
    """oracle -> arm -> seed -> metrics.json of every landed campaign unit, and the units left out with why: test
    units, units outside the protocol's 75, and units not run from a clean checkout of the campaign commit."""
    commit = campaign_commit(state)
    protocol = set(campaign_units(settings(state)["chosen"]))
    units: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    left_out = []
    for path in sorted(state.glob("units/*/*/seed*/metrics.json")):
        metrics = read_json(path)
        ran_from = str(metrics.get("commit"))
        why = ("a test unit" if metrics.get("test") else
               "not one of the protocol's units" if (metrics["oracle"], metrics["arm"], metrics["seed"]) not in protocol
               else f"ran from {ran_from[:7]}, not the campaign commit {commit[:7]}" if not ran_from.startswith(commit)
               else "ran from a checkout with changed tracked files" if not metrics.get("commit_clean") else None)
        if why:
            left_out.append(f"{path.parent.relative_to(state)} ({why})")
            continue
        units.setdefault(metrics["oracle"], {}).setdefault(metrics["arm"], {})[metrics["seed"]] = metrics
    return units, left_out


def direction(stat: dict[str, Any], lower_is_better: bool = False) -> str:
    """A paired difference's verdict: better, worse, no difference (interval includes 0), or undecided (< 2 seeds)."""
    if stat["n"] < 2:
        return "undecided"
    sign = -1 if lower_is_better else 1
    low, high = sorted((sign * stat["ci_low"], sign * stat["ci_high"]))
    return "better" if low > 0 else "worse" if high < 0 else "no difference"


def judged(stat: dict[str, Any]) -> dict[str, Any]:
    """A paired difference with its verdict."""
    return {**stat, "verdict": direction(stat)}


def at_equal_calls(arms: dict[str, dict[int, dict[str, Any]]], name: str, reference: str) -> dict[str, Any] | None:
    """`name` - `reference` on the curves' verdict measures at C, the most calls at which every unit of both arms
    (paired by seed) has a curve point; None where C is B (the verdicts at B already compare them at equal calls)."""
    from hypospace_recovery import t_interval

    seeds = sorted(set(arms[name]) & set(arms[reference]))
    units = [arms[arm][seed] for arm in (name, reference) for seed in seeds]
    common = set.intersection(*(set(u["curves"]["calls"]) for u in units)) if units else set()
    if not common or max(common) >= min(u["budget"] for u in units):
        return None
    calls = max(common)

    def read(unit: dict[str, Any], measure: str) -> float:
        return unit["curves"][measure][unit["curves"]["calls"].index(calls)]

    return {"calls": calls, **{m: judged({**t_interval([read(arms[name][s], m) - read(arms[reference][s], m)
                                                        for s in seeds]), "seeds": seeds})
                               for m in CURVE_VERDICT_MEASURES}}


def law_fits(state: Path, oracle: str, arms: dict[str, dict[int, dict[str, Any]]],
             bootstrap: int = LAW_BOOTSTRAP) -> dict[str, Any]:
    """R = -a exp(c D) + b over each RL unit's logged steps, pooled over seeds per arm and over every arm; "one law
    holds" when every arm's bootstrap c interval overlaps the pooled fit's."""
    import numpy as np

    from divrl.analysis.law import MIN_POINTS, fit_exponential_law
    from divrl.analysis.runs import load_log_history, metric_series

    def fit(points: list[tuple[float, float]]) -> dict[str, Any] | None:
        if len(points) < MIN_POINTS:
            return None
        law = fit_exponential_law(np.array([p[0] for p in points]), np.array([p[1] for p in points]), bootstrap)
        return {"a": law.a, "b": law.b, "c": law.c, "c_low": law.c_low, "c_high": law.c_high, "r2": law.r2,
                "points": law.num_points}

    per_arm, everything = {}, []
    for name, seeds in arms.items():
        logs = [unit_dir(state, (oracle, name, seed)) for seed in seeds]
        points = [(d, r) for folder in logs if (folder / "trainer_state.json").is_file()
                  for _, r, d in metric_series(load_log_history(folder), *LAW_KEYS)]
        if points:
            per_arm[name] = fit(points)
            everything += points
    pooled = fit(everything)
    fitted = [f for f in per_arm.values() if f]
    holds = None if pooled is None or len(fitted) < 2 else all(
        f["c_low"] <= pooled["c_high"] and pooled["c_low"] <= f["c_high"] for f in fitted)
    return {"arms": per_arm, "pooled": pooled, "one_law_holds": holds}


def analyse(state: Path, units: dict[str, dict[str, dict[int, dict[str, Any]]]], chosen: Sequence[str],
            bootstrap: int = LAW_BOOTSTRAP) -> dict[str, Any]:
    """Per oracle: each arm's means with seed-level intervals, the anchor, the paper's claim, divrl's question, the
    verdicts against arms 4 and 1, and the law fits."""
    from hypospace_recovery import t_interval
    from molecules_v4_report import paired

    measures = ["auc_top10", *(f"{m}_{t}" for t in TAUS for m in ("yield", "novel_yield", f"ob{OB_N}", "circles",
                                                                       "scaffolds", "intdiv"))]
    out: dict[str, Any] = {}
    for oracle in chosen:
        arms = {name: units.get(oracle, {}).get(name, {}) for name in ARMS}
        arms = {name: seeds for name, seeds in arms.items() if seeds}
        summary = {name: {**{m: t_interval([u[m] for u in seeds.values() if u[m] is not None]) for m in measures},
                          "seeds": sorted(seeds),
                          "stopped_short_calls": sorted(u["calls"] for u in seeds.values() if u["stopped_short"])}
                   for name, seeds in arms.items()}
        auc = summary.get("reinvent-replay", {}).get("auc_top10", {"mean": math.nan, "n": 0})
        anchor = {"pmo": RANKED_ORACLES[oracle], "arm2": auc, "within": None if auc["n"] == 0 else
                  abs(auc["mean"] - RANKED_ORACLES[oracle]) <= ANCHOR_MARGIN}
        claim = {}
        for label in TAUS:
            yields = paired(arms, "ips-replay", "reinvent-replay", f"yield_{label}")
            burden = paired(arms, "ips-replay", "reinvent-replay", f"ob{OB_N}_{label}")
            decided = min(yields["n"], burden["n"]) >= 2
            claim[label] = {"yield": yields, "ob": burden, "reproduced": None if not decided else
                            direction(yields) == "better" and direction(burden, lower_is_better=True) == "better"}
        question = {name: {m: paired(arms, name, "prior", m) for m in VERDICT_MEASURES[:2]}
                    for name in arms if name != "prior"}
        beats = [name for name, q in question.items() if all(direction(s) == "better" for s in q.values())]
        verdicts = {name: {ref: {m: judged(paired(arms, name, ref, m)) for m in VERDICT_MEASURES}
                           for ref in ("grpo-filter", "prior") if ref != name and ref in arms}
                    for name in arms if name != "prior"}
        pairs = [(name, ref) for name, refs in verdicts.items() for ref in refs]
        pairs += [("ips-replay", "reinvent-replay")] if {"ips-replay", "reinvent-replay"} <= set(arms) else []
        equal_calls = {f"{name} - {ref}": stats for name, ref in pairs if (stats := at_equal_calls(arms, name, ref))}
        out[oracle] = {"arms": summary, "anchor": anchor, "claim": claim, "question": question,
                       "beat_prior": beats, "verdicts": verdicts, "equal_calls": equal_calls,
                       "law": law_fits(state, oracle, arms, bootstrap)}
    return out


def markdown(pilot: dict[str, Any], analysis: dict[str, Any], missing: list[Unit], left_out: list[str]) -> str:
    """The report's text: the settings and what landed, the anchor, the claim, divrl's question, the verdicts, the
    per-arm table and the law."""
    from molecules_v4_report import _interval as _stat  # a mean with its interval, as v4's report writes it

    chosen = pilot["chosen"]
    taus = "; ".join(f"{o}: tau1 {pilot['oracles'][o]['tau1']}, tau2 {pilot['oracles'][o]['tau2']}" for o in chosen)
    expected = len(campaign_units(chosen))
    lines = ["## Evidence v5: IPS-GRPO against REINVENT and divrl's methods against the prior "
             "(`benchmarks/molecules_v5.py`)", "",
             f"Protocol: `benchmarks/evidence/molecules_v5/protocol.md`. Prior `{PRIOR}`; B = {BUDGET:,} calls, "
             f"{BATCH} molecules a step, step cap {MAX_STEPS}; oracle 1 `{chosen[0]}`, oracle 2 `{chosen[1]}`; {taus} "
             f"(tau pilot, {pilot['samples']:,} prior samples). A hit scores above tau and passes the chemistry gate; "
             f"novel: not in MOSES train. Units landed: {expected - len(missing)} of {expected}."]
    if missing:
        lines += ["", f"**Campaign incomplete**: {len(missing)} units missing: "
                  + ", ".join(f"{o} {a} seed {s}" for o, a, s in missing) + "."]
    if left_out:
        lines += ["", f"Units left out (not the protocol's runs): {', '.join(left_out)}."]
    lines += ["", "### Sanity first: arm 2 (REINVENT + filter + replay) against PMO's REINVENT AUC top-10", ""]
    for oracle in chosen:
        anchor = analysis[oracle]["anchor"]
        reading = {None: "not yet run", True: "within", False: "**NOT within**"}[anchor["within"]]
        lines.append(f"- {oracle}: arm 2 {_stat(anchor['arm2'], difference=False)} against PMO's {anchor['pmo']:.3f}: "
                     f"{reading} {ANCHOR_MARGIN}.")
    if any(analysis[o]["anchor"]["within"] is False for o in chosen):
        lines += ["", "**The anchor is missed: every comparison below is read against a REINVENT that does not match "
                      "PMO's.**"]
    lines += ["", "### The paper's claim: arm 3 (IPS-GRPO + filter + replay) - arm 2 (REINVENT + filter + replay)",
              "", "| oracle | tau | Yield difference | OB_tau(100) difference | reproduced |", "|---|---|---|---|---|"]
    for oracle in chosen:
        for label, claim in analysis[oracle]["claim"].items():
            verdict = {None: "undecided", True: "yes", False: "NOT reproduced"}[claim["reproduced"]]
            lines.append(f"| {oracle} | {label} | {_stat(claim['yield'])} | {_stat(claim['ob'])} | {verdict} |")
    lines += ["", "### divrl's question: some arm beats prior sampling (arm 1) on novel Yield@tau1 and #Circles", ""]
    for oracle in chosen:
        beats = analysis[oracle]["beat_prior"]
        lines.append(f"- {oracle}: " + (", ".join(beats) if beats else "no arm") + " (both paired intervals above 0).")
    short = sorted({f"{o} {name}" for o in chosen for name, s in analysis[o]["arms"].items()
                    if s["stopped_short_calls"]})
    lines += ["", "### Verdict per arm against GRPO + filter (arm 4) and prior sampling (arm 1), paired by seed", "",
              "Arms 7-11 ran 3 seeds (oracle 1 only): their intervals are wide."
              + (f" Units of {', '.join(short)} stopped short of B: rows with them compare each unit at the calls it "
                 "made; the table after this one compares at equal calls." if short else ""), "",
              "| oracle | arm | against | novel Yield@tau1 | #Circles@tau1 | AUC top-10 |", "|---|---|---|---|---|---|"]
    for oracle in chosen:
        for name, refs in analysis[oracle]["verdicts"].items():
            for ref, stats in refs.items():
                cells = " | ".join(f"{s['verdict']}: {_stat(s)}" for s in stats.values())
                lines.append(f"| {oracle} | {ARMS[name].number} {name} | {ARMS[ref].number} {ref} | {cells} |")
    lines += ["", "### At equal calls, where a unit stopped short of B: each pair read from the curves at C, the most "
                  "calls every unit of both arms reached", ""]
    rows = [f"| {oracle} | {pair} | {stats['calls']:,} | "
            + " | ".join(f"{stats[m]['verdict']}: {_stat(stats[m])}" for m in CURVE_VERDICT_MEASURES) + " |"
            for oracle in chosen for pair, stats in analysis[oracle]["equal_calls"].items()]
    if rows:
        lines += ["| oracle | arm - against | C (calls) | novel Yield@tau1 | #Circles@tau1 |", "|---|---|---|---|---|",
                  *rows]
    else:
        lines.append("Every unit compared reached B: the verdicts above compare at equal calls.")
    columns = ("auc_top10", "yield_tau1", "novel_yield_tau1", f"ob{OB_N}_tau1", "circles_tau1", "scaffolds_tau1",
               "intdiv_tau1", "yield_tau2", "novel_yield_tau2", f"ob{OB_N}_tau2")
    lines += ["", "### Per arm: mean over seeds, Student-t 95% interval (OB counts a seed that never reached 100 hits "
                  f"as B + 1 = {BUDGET + 1:,})", "",
              "| oracle | arm | seeds | stopped short | " + " | ".join(columns) + " |",
              "|---|---|---|---|" + "---|" * len(columns)]
    for oracle in chosen:
        for name, s in analysis[oracle]["arms"].items():
            calls = s["stopped_short_calls"]
            short = f"{len(calls)} ({', '.join(f'{c:,}' for c in calls)} calls)" if calls else "0"
            lines.append(f"| {oracle} | {ARMS[name].number} {name} | {len(s['seeds'])} | {short} | "
                         + " | ".join(_stat(s[c], difference=False) for c in columns) + " |")
    lines += ["", "### Quality-diversity law R = -a exp(c D) + b (the task reward before shaping against "
                  "diversity/pairwise, every logged step, pooled over seeds)", "",
              "Deviation: the protocol's `divrl fit-law` reads the logged `reward` by default, which is the shaped "
              "reward (IPS's is 64 times the task reward); the fits read `divrl/task_reward`, logged alike for every "
              "arm (decisions.md, 2026-12-02).", "", "| oracle | arm | c [bootstrap 95%] | R^2 | points |",
              "|---|---|---|---|---|"]
    for oracle in chosen:
        law = analysis[oracle]["law"]
        for name, f in [*law["arms"].items(), ("all arms", law["pooled"])]:
            row = "too few points | - | -" if f is None else \
                f"{f['c']:.3g} [{f['c_low']:.3g}, {f['c_high']:.3g}] | {f['r2']:.3f} | {f['points']}"
            lines.append(f"| {oracle} | {name} | {row} |")
        holds = {None: "undecided", True: "holds", False: "does NOT hold"}[law["one_law_holds"]]
        lines.append(f"| {oracle} | one law | {holds} | | |")
    lines += ["", "How to read the law: the bootstrap resamples logged steps, which follow each other within a run, so "
                  "its intervals are narrower than seed-level ones; an arm whose fit explains little (low R^2) has an "
                  "interval wide enough to overlap any other, and counts in the rule all the same (the protocol's)."]
    lines += ["", f"![Yield@tau1 against calls, {chosen[0]}](benchmarks/results/molecules_v5_yield.png)"]
    return "\n".join(lines) + "\n"


def figure(state: Path, units: dict[str, dict[int, dict[str, Any]]], oracle: str, path: Path) -> None:
    """Yield@tau1 against oracle calls per arm on `oracle`, redrawn from the committed journals: a thin line per seed
    (dotted from a stop short to B, where its hits stay) and the mean over seeds bold."""
    import matplotlib
    from molecules_v4_report import plot_seed_curves

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from divrl.task import JOURNAL_FILE
    from divrl.tasks.molecules.metrics import yield_curve
    from divrl.tasks.molecules.scoring import read_history

    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = plt.get_cmap("tab20").colors  # the dark half for arms 1-10, then the light half: 11 arms, 11 colours
    for name, seeds in units.items():
        arm, curves = ARMS[name], []
        for seed, metrics in sorted(seeds.items()):
            calls = [(c.smiles, c.score) for c in read_history(unit_dir(state, (oracle, name, seed)) / JOURNAL_FILE)]
            curve = yield_curve(gate_hits(calls[: metrics["budget"]], metrics["tau1"]), metrics["tau1"]) or [0]
            curves.append((curve, metrics["budget"]))
        index = 2 * (arm.number - 1)
        plot_seed_curves(ax, curves, colors[index % len(colors) + index // len(colors)], f"{arm.number} {name}")
    # symlog: prior sampling's ~100 hits stay visible beside the RL arms' thousands
    ax.set_yscale("symlog", linthresh=10)
    ax.set(xlabel="oracle calls", ylabel="Yield@tau1 (distinct gated hits, symlog)",
           title=f"Evidence v5, {oracle}: Yield@tau1 against calls\n(thin: seeds, dotted after a stop; bold: mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(state: Path, results: Path, bootstrap: int = LAW_BOOTSTRAP) -> dict[str, Any]:
    """Everything from the committed files alone: results/molecules_v5.{json,md} and the Yield figure."""
    pilot = settings(state)
    units, left_out = load_units(state)
    missing = [(o, a, s) for o, a, s in campaign_units(pilot["chosen"]) if s not in units.get(o, {}).get(a, {})]
    analysis = analyse(state, units, pilot["chosen"], bootstrap)
    result = {"pilot": pilot, "units": {o: {a: {str(s): m for s, m in seeds.items()} for a, seeds in arms.items()}
                                        for o, arms in units.items()},
              "missing": [list(u) for u in missing], "left_out": left_out, "oracles": analysis}
    results.mkdir(parents=True, exist_ok=True)
    (results / "molecules_v5.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (results / "molecules_v5.md").write_text(markdown(pilot, analysis, missing, left_out))
    first = units.get(pilot["chosen"][0], {})
    if first:
        figure(state, {a: first[a] for a in ARMS if a in first}, pilot["chosen"][0], results / "molecules_v5_yield.png")
    print((results / "molecules_v5.md").read_text())
    return result


# ------------------------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    """The subcommands: pilot-tau, unit, lane, report."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state", type=Path, default=STATE, help="the committed state folder (a pinned worktree's "
                        "campaign points it at main's)")
    common.add_argument("--work", type=Path, default=ROOT.parent / "v5-work", help="checkpoints (default ../v5-work)")
    common.add_argument("--results", type=Path, default=RESULTS, help="where the report goes")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    testing = argparse.ArgumentParser(add_help=False)
    testing.add_argument("--test", action="store_true", help="allow the test-only flags (recorded as deviations)")
    pilot = commands.add_parser("pilot-tau", parents=[common, testing], help="the tau pilot")
    pilot.add_argument("--samples", type=int, help=f"test only: prior samples (protocol: {PILOT_SAMPLES:,})")
    unit = commands.add_parser("unit", parents=[common, testing], help="one unit")
    unit.add_argument("oracle")
    unit.add_argument("arm", choices=list(ARMS))
    unit.add_argument("seed", type=int)
    unit.add_argument("--budget", type=int, help=f"test only: oracle calls (protocol: {BUDGET:,})")
    unit.add_argument("--max-steps", type=int, help=f"test only: the step cap (protocol: {MAX_STEPS})")
    lane = commands.add_parser("lane", parents=[common], help="one lane's units, seed by seed")
    lane.add_argument("lane", type=int, choices=(0, 1))
    commands.add_parser("report", parents=[common], help="results/molecules_v5.{md,json,png}")
    args = parser.parse_args(argv)
    state = args.state.resolve()
    os.chdir(ROOT)  # recipes are named relative to the checkout
    if args.command == "pilot-tau":
        deviations = checked_deviations({"samples": args.samples}, args.test)
        print(json.dumps(pilot_tau(state, args.samples or PILOT_SAMPLES, deviations), indent=1))
    elif args.command == "unit":
        deviations = checked_deviations({"budget": args.budget, "max_steps": args.max_steps}, args.test)
        run_unit(state, args.work.resolve(), (args.oracle, args.arm, args.seed), args.budget or BUDGET,
                 args.max_steps or MAX_STEPS, deviations)
    elif args.command == "lane":
        for one in lane_units(settings(state)["chosen"], args.lane):
            run_unit(state, args.work.resolve(), one)
    else:
        write_report(state, args.results.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
