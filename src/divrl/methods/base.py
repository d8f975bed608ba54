"""The method registry: what a diversity method declares, the stages it acts in, and the per-step objects the
trainer hands it.

A method is one class in one file of `divrl.methods`, registered with `@register`. It declares its config fields
(a dataclass merged into `DivRLConfig`), when it is on, how its fields are checked, the task hooks it needs, its
model-card entry, its preset, its learned state, and the stage of the step it acts in. The algorithm itself is a
pure function in `divrl.core`; the method file only wires it. `DivRLTrainer` (and its presets, model card, hook
checks and checkpoints) read the registry instead of naming methods.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from divrl.methods.metrics import log_global_means


class Stage(enum.Enum):
    """Where in a training step a method acts (stages run in this order; methods of one stage by `order`)."""

    REWARD = "reward"  # shapes the global batch's rewards in group order, before TRL normalises them
    ADVANTAGE = "advantage"  # replaces or edits the advantages TRL computed from the rewards
    LOSS = "loss"  # edits TRL's loss forward or adds a term to its loss
    OBJECTIVE = "objective"  # replaces GRPO's surrogate (`surrogate_inputs` + `objective_term`: FlowRL)
    OUTER = "outer"  # acts around the steps (the population's members, selection and soup)


@dataclass(frozen=True)
class Card:
    """A method's entry on the model card: its name, its Hub tag and TRL's `_paper` dict of its paper."""

    name: str
    tag: str
    paper: dict[str, Any]


class Method:
    """One diversity method. Subclasses set the class attributes and override the hooks of their stage.

    An instance belongs to one policy (a population has one per member) and holds the method's learned state.
    """

    name: ClassVar[str]  # registry key
    switch: ClassVar[str]  # the DivRLConfig field that turns it on (named in error messages)
    stage: ClassVar[Stage]
    order: ClassVar[int] = 0  # position among the methods of its stage (lower runs first)
    Config: ClassVar[type]  # dataclass of its DivRLConfig fields (names are public: recipes, CLI flags)
    card: ClassVar[Card | None] = None
    preset: ClassVar[dict[str, Any]] = {}  # what its preset trainer (presets.py) switches on
    state_key: ClassVar[str | None] = None  # its key in a checkpoint's method state; None: it learns nothing
    empty_state: ClassVar[Any] = None  # what that key holds in a run where the method is off
    shared: ClassVar[bool] = False  # one instance for all policies of a trainer (a data stream, not learned state)
    counts_outcomes: ClassVar[bool] = False  # needs an outcome key per completion (REWARD stage: `step.keys`)
    bonus: ClassVar[bool] = False  # adds to the `divrl_bonus` reward column (REWARD stage: `step.bonus`)
    needs_lengths: ClassVar[bool] = False  # ADVANTAGE stage: reads `step.lengths`
    replaces_advantages: ClassVar[bool] = False  # ADVANTAGE stage: `advantages` replaces TRL's (one such method)
    train_only: ClassVar[bool] = True  # ADVANTAGE stage: acts on training batches only (False: evaluation ones too)
    # LOSS / OBJECTIVE: reads `inputs["divrl_rewards"]` (shaped, summed) and `inputs["divrl_task_rewards"]` (the
    # weighted task score before any method's shaping)
    reads_rewards: ClassVar[bool] = False
    scales_by_group: ClassVar[bool] = False  # REWARD: multiplies task rewards by factors in [1, group] (IPS's 1/p_hat)
    runs_on_toy: ClassVar[bool] = True  # the toy backend runs it (False: it needs completion texts or a tokenizer)

    def __init__(self, args: Any, hooks: Any) -> None:
        self.args = args
        self.hooks = hooks

    # ------------------------------------------------------------------ declared per class
    @classmethod
    def enabled(cls, args: Any) -> bool:
        """Whether `args` switches this method on."""
        raise NotImplementedError

    @classmethod
    def validate(cls, args: Any) -> None:
        """Raise a ValueError naming the field when one of this method's fields is out of range or clashes."""

    @classmethod
    def card_for(cls, args: Any) -> Card | None:
        """The model-card entry of a run with `args` (a method with several variants picks one)."""
        return cls.card

    @classmethod
    def cards(cls) -> tuple[Card, ...]:
        """Every entry `card_for` can return (what `divrl methods` lists as the method's papers)."""
        return () if cls.card is None else (cls.card,)

    @classmethod
    def check_task(cls, args: Any, task: Any) -> None:
        """Raise `FieldProblem` (via `refuse`) when one of this method's settings does not fit `task`; no side
        effects, so a recipe checks it before the model loads."""

    @classmethod
    def resolve_hooks(cls, args: Any, task: Any) -> dict[str, Any]:
        """The task hooks this method needs (`TaskHooks` field -> callable), checked once at construction: a
        missing hook raises a ValueError naming the config field."""
        return {}

    @classmethod
    def needs_reference_logps(cls, args: Any) -> bool:
        """Whether its loss reads the reference policy's per-token log-probs of the completions."""
        return False

    @classmethod
    def needs_sampled_logps(cls, args: Any) -> bool:
        """Whether the sampler's per-token log-probs must be kept for this step (unlikeliness)."""
        return False

    @classmethod
    def drives_entropy_bonus(cls, args: Any) -> bool:
        """Whether this LOSS method drives TRL's entropy bonus through `LossContext.entropy_bonus` (MaxEnt): the
        trainer then enables TRL's bonus and hands the bonus to each loss."""
        return False

    def configure_trainer(self, trainer: Any) -> None:
        """Called once after TRL's `__init__`, for a method that wires something into the trainer it runs in
        (FlowRL's log Z head: its optimizer groups and callback)."""

    # ------------------------------------------------------------------ learned state
    def has_state(self) -> bool:
        """Whether this instance keeps state under `state_key` (some configurations of a method keep none)."""
        return self.state_key is not None

    def state_dict(self) -> Any:
        """The method's learned state (torch.save-able, weights_only-safe)."""
        return None

    def load_state_dict(self, state: Any) -> None:
        """Restore what `state_dict` returned."""

    # ------------------------------------------------------------------ stage hooks
    def shape_rewards(self, step: RewardStep) -> None:
        """REWARD: edit `step.rewards_per_func`'s task columns, or add to `step.bonus`."""

    def advantages(self, step: AdvantageStep) -> torch.Tensor | None:
        """ADVANTAGE: the global batch's advantages replacing TRL's (None: leave them)."""
        return None

    def zeroed_rows(self, step: AdvantageStep) -> torch.Tensor | None:
        """ADVANTAGE: a bool mask of global rows whose advantage becomes exactly 0 (None: none)."""
        return None

    def before_loss(self, context: LossContext) -> None:
        """LOSS: called before TRL's loss of each micro-batch (e.g. to set `context.entropy_bonus`)."""

    def edit_loss_logps(self, context: LossContext, inputs: dict[str, Any], per_token_logps: torch.Tensor
                        ) -> torch.Tensor:
        """LOSS: edit the per-token log-probs of TRL's loss forward of `inputs` while TRL's loss runs (training
        only)."""
        return per_token_logps

    def loss_term(self, step: LossStep) -> torch.Tensor | None:
        """LOSS: a term added to TRL's loss of this micro-batch (None: nothing)."""
        return None

    def add_to_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """OBJECTIVE: add the objective's own parameters to the trainer's optimizer (FlowRL's log Z head)."""

    def surrogate_inputs(self, inputs: dict[str, Any], training: bool) -> dict[str, Any]:
        """OBJECTIVE: the inputs TRL's loss runs on instead of `inputs` (FlowRL: zeroed advantages, so that GRPO's
        surrogate is 0 and only TRL's KL, entropy and aux terms remain)."""
        return inputs

    def objective_term(self, step: LossStep) -> torch.Tensor | None:
        """OBJECTIVE: the objective that replaces GRPO's surrogate on this micro-batch (None: nothing)."""
        return None


REGISTRY: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: add a method to the registry (registration order = the model card's order)."""
    if cls.name in REGISTRY:
        raise ValueError(f"a method named {cls.name!r} is already registered ({REGISTRY[cls.name].__module__})")
    REGISTRY[cls.name] = cls
    return cls


def methods(stage: Stage | None = None) -> Iterator[type[Method]]:
    """Registered methods (of `stage`, by `order`; all in registration order when stage is None)."""
    if stage is None:
        yield from REGISTRY.values()
        return
    yield from sorted((m for m in REGISTRY.values() if m.stage is stage), key=lambda m: m.order)


def configurable(method: type[Method], args: Any) -> bool:
    """Whether `args` has `method`'s fields: `DivRLConfig` has every method's of `divrl.methods`; a method added
    outside divrl needs a config class that also inherits its `Config` (README, "Add a method")."""
    return isinstance(args, method.Config)


def active(args: Any, stage: Stage | None = None) -> list[type[Method]]:
    """The methods `args` switches on (of `stage`, by `order`)."""
    return [m for m in methods(stage) if configurable(m, args) and m.enabled(args)]


def group_scaled(args: Any) -> bool:
    """Whether an enabled REWARD method multiplies task rewards by factors up to the group size (IPS): an objective
    that reads rewards on their own scale (REINVENT's sigma S) divides them by the group size."""
    return any(m.scales_by_group for m in active(args, Stage.REWARD))


def counts_outcomes(args: Any) -> bool:
    """Whether an enabled method needs an outcome key per completion (IPS, the count bonus)."""
    return any(m.counts_outcomes and configurable(m, args) and m.enabled(args) for m in REGISTRY.values())


def presets_of(*names: str) -> dict[str, Any]:
    """The merged presets of the named methods (what a preset trainer switches on)."""
    merged: dict[str, Any] = {}
    for name in names:
        merged.update(REGISTRY[name].preset)
    return merged


# ---------------------------------------------------------------------------------- per-step objects
@dataclass
class RewardStep:
    """What REWARD methods read and edit: one batch of completions in group order (the trainer's global batch, all
    processes; the toy backend's batch of one member).

    `rewards_per_func` (rows, columns) holds the task's columns first and, when a bonus method is on, the
    `divrl_bonus` column last; methods scale task columns in place and add bonuses to `bonus`. `task_reward` and
    `primary` are taken before any shaping. What a method needs of the completions comes from the callables, so the
    same method object runs on the LLM trainer (task hooks on texts) and on the toy backend (its environments).
    """

    rewards_per_func: torch.Tensor
    num_task_rewards: int
    task_reward: torch.Tensor  # (rows,) weighted task reward, NaN where unscorable; on the CPU
    primary: torch.Tensor  # (rows,) the first reward function's score (validity for HypoSpace); on the CPU
    group: int  # completions per prompt
    texts: Callable[[], list[str]]  # the completions' text
    outcome_keys: Callable[[], list[Any]]  # each completion's outcome from the task (`task.outcome_key` or text)
    descriptors: Callable[[], list[Any]]  # each completion's behaviour descriptor (`task.behavior`), or None
    prompt_keys: Callable[[], list[Any]]  # a key naming each completion's prompt
    embeddings: Callable[[str], torch.Tensor]  # (rows, dim) embeddings of a kind ('ngram', 'hidden', 'task')
    sequence_logps: Callable[[], torch.Tensor]  # (rows,) mean log-prob under the sampling policy
    metrics: dict[str, list[float]]
    keys: list[Any] | None = None  # outcome keys (rows), set before the methods that count outcomes run
    bonus: torch.Tensor = field(default=None)  # type: ignore[assignment]  # (rows,) filled by bonus methods

    def __post_init__(self) -> None:
        if self.bonus is None:
            self.bonus = torch.zeros(len(self.task_reward))

    def scale_task_rewards(self, factor: torch.Tensor) -> None:
        """Multiply every task column by a per-row factor (rows,)."""
        rewards = self.rewards_per_func
        rewards[:, : self.num_task_rewards] *= factor.to(rewards.device, rewards.dtype).unsqueeze(1)


@dataclass
class AdvantageStep:
    """What ADVANTAGE methods read: the global batch's summed rewards, unscorable rows filled with their group's
    mean (`filled`), the mask of those rows, the completion lengths and the group size."""

    summed: torch.Tensor  # (rows,) each row's reward as TRL sums it (NaN as 0), after shaping
    filled: torch.Tensor  # (rows,) `summed`, unscorable rows replaced by their group's mean
    unscorable: torch.Tensor  # (rows,) bool
    lengths: torch.Tensor | None  # (rows,) completion lengths
    group: int
    scale_rewards: str


@dataclass
class EntropyBonus:
    """TRL's entropy bonus as a LOSS method drives it (MaxEnt): the trainer hands these values to TRL's loss and
    reads back what TRL's adaptive controller changed. `coef`: the coefficient; `adaptive`: TRL's
    `use_adaptive_entropy` rule toward `target`, which steps `coef` at each optimizer step and records the step's
    `last_world_entropy` (the bonus applies only while that entropy is at or below the target)."""

    coef: float = 0.0
    adaptive: bool = False
    target: float | None = None
    last_world_entropy: float = math.inf


@dataclass
class LossContext:
    """What LOSS and OBJECTIVE methods may use of the trainer running them, and nothing more: the accelerator
    (processes, device, reductions, `sync_gradients`), the metrics sink, a policy forward, the tokenizer's pad id,
    TRL's clipping settings and the entropy bonus to drive. DivRLTrainer builds one after TRL's `__init__`."""

    accelerator: Any
    metrics: dict[str, dict[str, list[float]]]  # mode ('train' / 'eval') -> metric name -> values (TRL's `_metrics`)
    # the policy's per-token log-probs of a batch (input_ids, attention_mask, completion_mask) under `model`
    policy_logps: Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]
    causal_lm: Callable[[Any], Any]  # the (possibly wrapped, PEFT) model's causal LM: FlowRL's prompt pass
    pad_token_id: int | None
    epsilon_low: float
    epsilon_high: float
    loss_type: str
    entropy_bonus: EntropyBonus = field(default_factory=EntropyBonus)
    tokenizer: Any = None  # the trainer's tokenizer (None on the toy backend): replay decodes and re-encodes rows
    # the reference policy's per-token log-probs of such a batch (None on the toy backend)
    reference_logps: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None

    def log_means(self, mode: str, sums: dict[str, torch.Tensor], count: torch.Tensor) -> None:
        """Log each of `sums` divided by `count`, both summed over all processes (a global masked mean)."""
        log_global_means(self.accelerator, self.metrics[mode], sums, count)


@dataclass
class LossStep:
    """What LOSS and OBJECTIVE methods read: one micro-batch's loss forward (`per_token_logps`, `entropies`), its
    `inputs`, the loss mask, the gradient-accumulation divisor, the mode ('train' / 'eval') and the loss context
    (the trainer's narrow interface)."""

    context: LossContext
    model: Any
    inputs: dict[str, Any]
    per_token_logps: torch.Tensor
    entropies: torch.Tensor | None
    mask: torch.Tensor
    entropy_mask: torch.Tensor | None  # the tokens TRL's entropy bonus acts on (top_entropy_quantile < 1)
    accumulation: float
    mode: str


# ---------------------------------------------------------------------------------- learned state
def method_states(instances: dict[str, Method], shared: bool) -> dict[str, Any]:
    """{state_key: state} of every registered method keeping state (per-policy ones, or the trainer's shared ones);
    a method that is off, or keeps no state in this configuration, writes its `empty_state`, so the layout of a
    checkpoint does not depend on which methods ran."""
    states = {}
    for method in REGISTRY.values():
        if method.state_key is None or method.shared != shared:
            continue
        instance = instances.get(method.name)
        states[method.state_key] = (instance.state_dict() if instance is not None and instance.has_state()
                                    else method.empty_state)
    return states


def load_method_states(instances: dict[str, Method], shared: bool, state: dict[str, Any]) -> None:
    """Restore what `method_states` returned; raise a ValueError when the checkpoint and this config disagree on
    which methods keep state (a checkpoint written before a method existed lacks its key: read as empty)."""
    for method in REGISTRY.values():
        if method.state_key is None or method.shared != shared:
            continue
        saved = state.get(method.state_key, method.empty_state)
        instance = instances.get(method.name)
        keeps = instance is not None and instance.has_state()
        if not keeps and saved is not None and saved != method.empty_state:
            raise ValueError(f"the checkpoint has {method.name} state ({method.state_key}) but this config does not "
                             f"enable {method.switch}: resume with the run's config")
        if keeps and saved is None:
            raise ValueError(f"the checkpoint lacks {method.name} state ({method.state_key}) but this config enables "
                             f"{method.switch}: resume with the run's config")
        if keeps:
            instance.load_state_dict(saved)
