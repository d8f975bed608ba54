"""QD-GRPO (the execution-rewards paper, Sec. 4.1, Eq. 3): a MAP-Elites archive over the task's behaviour
descriptors; a completion that fills an empty cell earns beta_new, one that improves a cell's elite beta_imp
(`divrl.core.GridArchive`, `divrl.core.archive_bonus`; the archives are learned state)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from divrl.core import GridArchive, archive_bonus
from divrl.core.archive import AddStatus
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check, check_choice
from divrl.methods.base import Card, Method, RewardStep, Stage, register
from divrl.methods.hooks import checked_behavior, refuse
from divrl.task import has_hook

ARCHIVE_SCOPES = ("global", "prompt")
GLOBAL_ARCHIVE = ""  # the key of the one archive of qd_archive='global'
DEFAULT_CELLS_PER_DIM = 10  # the execution-rewards paper: a 10 x 10 grid


@dataclass
class QDConfig:
    """The QD fields of `DivRLConfig`."""

    qd: bool = field(default=Unset(False), metadata=_help(
        "Quality-diversity archive bonuses (the execution-rewards paper, Eq. 3); needs a task with a `behavior` hook. "
        "Default False."))
    qd_dims: list[int] | None = field(default=None, metadata=_help(
        "Cells per behaviour dimension. Default None = 10 cells per dimension of task.behavior_dims "
        "(the execution-rewards paper: a 10 x 10 grid)."))
    qd_ranges: list[float] | None = field(default=None, metadata=_help(
        "Descriptor range per dimension, flattened [low0, high0, low1, high1, ...] (pairs also accepted). "
        "Default None = [0, 1] per dimension (the execution-rewards paper)."))
    qd_beta_new: float = field(default=0.5, metadata=_help(
        "Bonus for a completion that fills an empty cell (the execution-rewards paper: beta_new = 0.5). Default 0.5."))
    qd_beta_imp: float = field(default=0.3, metadata=_help(
        "Bonus for a completion that improves a cell's elite (the execution-rewards paper: beta_imp = 0.3). Default "
        "0.3."))
    qd_min_reward: float = field(default=0.0, metadata=_help(
        "Archive (and pay a bonus to) only completions whose first reward function scores above this, so an output "
        "the task scores 0 (an invalid answer, a molecule the sanity gate rejects) never fills or improves a cell. "
        "Default 0.0."))
    qd_archive: str = field(default="global", metadata=_help(
        "'global': one archive for all prompts (the execution-rewards paper has a single context); 'prompt': one "
        "archive per distinct prompt. Default 'global'."))


@register
class QD(Method):
    """REWARD: insert the global batch into the archive(s); the bonus column gains each completion's archive
    bonus. A completion not scored above `qd_min_reward` is neither archived nor paid."""

    name = "qd"
    switch = "qd"
    stage = Stage.REWARD
    order = 30
    Config = QDConfig
    card = Card("QD-GRPO", "qd-grpo", papers.EXECUTION_REWARDS)
    preset = {"qd": True}
    state_key = "archives"
    empty_state: dict = {}  # noqa: RUF012 (a run without QD saves no archives)
    bonus = True

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.dims = list(args.qd_dims or [DEFAULT_CELLS_PER_DIM] * int(hooks.behavior_dims))
        self.ranges = [tuple(r) for r in (args.qd_ranges or [[0.0, 1.0]] * len(self.dims))]
        self.archives: dict[str, GridArchive] = {}

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.qd)

    @classmethod
    def validate(cls, args: Any) -> None:
        args.qd_ranges = _as_range_pairs(args.qd_ranges)
        check_choice("qd_archive", args.qd_archive, ARCHIVE_SCOPES)
        check(args.qd_dims is None or (len(args.qd_dims) > 0 and all(int(d) >= 1 for d in args.qd_dims)),
              "qd_dims", f"must list >= 1 cells per dimension, got {args.qd_dims}")
        check(args.qd_ranges is None or all(low < high for low, high in args.qd_ranges),
              "qd_ranges", f"every (low, high) needs low < high, got {args.qd_ranges}")
        check(args.qd_dims is None or args.qd_ranges is None or len(args.qd_dims) == len(args.qd_ranges),
              "qd_ranges", f"has {len(args.qd_ranges or [])} ranges but qd_dims has {len(args.qd_dims or [])} dims")
        check(math.isfinite(args.qd_min_reward), "qd_min_reward", f"must be a finite number, got {args.qd_min_reward}")
        check(args.qd_beta_new >= 0 and args.qd_beta_imp >= 0, "qd_beta_new",
              f"archive bonuses must be >= 0, got qd_beta_new={args.qd_beta_new}, qd_beta_imp={args.qd_beta_imp}")

    @classmethod
    def check_task(cls, args: Any, task: Any) -> None:
        if not has_hook(task, "behavior"):
            refuse("qd", "needs a task with a `behavior(completion, **row)` hook returning a descriptor in [0,1]^d")
        task_dims = getattr(task, "behavior_dims", None)
        if task_dims is None and args.qd_dims is None:
            refuse("qd_dims", "is needed when the task does not declare `behavior_dims`")
        if task_dims is not None and not (isinstance(task_dims, int) and task_dims >= 1):
            refuse("qd", f"task.behavior_dims must be a positive int, got {task_dims!r}")
        if task_dims is not None and args.qd_dims is not None and len(args.qd_dims) != task_dims:
            refuse("qd_dims", f"lists {len(args.qd_dims)} dimensions but the task describes behaviour in {task_dims} "
                              "(behavior_dims)")
        dims = task_dims if task_dims is not None else len(args.qd_dims)
        if args.qd_ranges is not None and len(args.qd_ranges) != dims:
            refuse("qd_ranges", f"gives {len(args.qd_ranges)} (low, high) ranges for behaviour in {dims} dimensions")

    @classmethod
    def resolve_hooks(cls, args: Any, task: Any) -> dict[str, Any]:
        cls.check_task(args, task)
        dims = task.behavior_dims if getattr(task, "behavior_dims", None) is not None else len(args.qd_dims)
        return {"behavior": checked_behavior(task.behavior, dims), "behavior_dims": dims}

    def archive(self, key: str = GLOBAL_ARCHIVE) -> GridArchive:
        """The archive of `key` (a prompt, or GLOBAL_ARCHIVE), created empty on first use."""
        if key not in self.archives:
            self.archives[key] = GridArchive(self.dims, self.ranges)
        return self.archives[key]

    def state_dict(self) -> Any:
        return {key: archive.state_dict() for key, archive in self.archives.items()}

    def load_state_dict(self, state: Any) -> None:
        self.archives = {}
        for key, archive_state in state.items():
            self.archive(key).load_state_dict(archive_state)

    def shape_rewards(self, step: RewardStep) -> None:
        eligible = step.primary > self.args.qd_min_reward
        objectives = step.task_reward.where(eligible, math.nan).tolist()
        descriptors = step.descriptors()
        if self.args.qd_archive == "global":
            statuses = self.archive(GLOBAL_ARCHIVE).add(descriptors, objectives)
            archives = [self.archive(GLOBAL_ARCHIVE)]
        else:
            keys = step.prompt_keys()
            statuses = []
            for start in range(0, len(keys), step.group):
                rows = slice(start, start + step.group)
                statuses += self.archive(keys[start]).add(descriptors[rows], objectives[rows])
            archives = list(self.archives.values())
        stats = [a.stats() for a in archives]
        step.metrics["qd/coverage"].append(sum(s.coverage for s in stats) / len(stats))
        step.metrics["qd/qd_score"].append(sum(s.qd_score for s in stats))
        step.metrics["qd/new_cells"].append(float(sum(s == AddStatus.NEW for s in statuses)))
        step.bonus += archive_bonus(statuses, self.args.qd_beta_new, self.args.qd_beta_imp)


def _as_range_pairs(ranges: list | None) -> list[list[float]] | None:
    """Accept [l0, h0, l1, h1, ...] or [[l0, h0], [l1, h1], ...]; return the list of pairs."""
    if ranges is None:
        return None
    if all(isinstance(r, list | tuple) for r in ranges):
        pairs = [list(map(float, r)) for r in ranges]
        check(all(len(p) == 2 for p in pairs), "qd_ranges", f"pairs must be (low, high), got {ranges}")
        return pairs
    check(len(ranges) % 2 == 0, "qd_ranges", f"flattened ranges need an even length, got {ranges}")
    return [[float(ranges[i]), float(ranges[i + 1])] for i in range(0, len(ranges), 2)]
