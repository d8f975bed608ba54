"""One training loop for every method and `+` combination on every toy environment.

A method is GRPO plus optional components: `ips` (reward / outcome probability), `qd` (MAP-Elites
archive bonuses), `maxent` (adaptive entropy bonus, kNN novelty, length-conditional advantages),
`pop` (population with periodic selection, soup and perturbation), `fkl` / `js` (mass-covering
divergence to the frozen initial policy, on samples drawn from it, replacing the reverse KL), `flowrl`
(FlowRL's trajectory-balance loss with a learned log Z replacing the clipped surrogate), `count` (a bonus
c / sqrt(1 + n) for each rewarded outcome, n = its count over the run), `unlikely` (rewards times
1 - beta rank / G, rank by the sample's mean log-prob), `passk` (best-of-k advantages), `clip-cov` / `kl-cov`
(Clip-Cov / KL-Cov on the tokens whose log-prob and advantage covary most), and TRL's own levers as baselines:
`clip-higher` (the ratio's upper clip at `clip_high`) and `top-entropy` (the loss on each member's highest-entropy
tokens only, as TRL's `top_entropy_quantile`). Any registered divrl method with a preset is a component under its
name too (`divrl.toy.methods`). The methods' settings are `DivRLConfig`'s own fields (`TrainConfig.method_value`),
checked by the methods' own `validate`. The reward-shaping and advantage components (ips, qd, maxent's
novelty and length bins, count, unlikely, passk, zero flat groups) run the LLM trainer's own method objects
(`divrl.methods`), one set per member, in the trainer's order, so the toy is an executable specification of the
trainer's REWARD and ADVANTAGE stages. On the loss side the toy policies keep TRL's part of the loss (the clipped
surrogate, its reverse-KL and entropy terms, TRL's two levers), and each member's LOSS and OBJECTIVE method objects
add theirs on a toy `LossContext`, as in the trainer: Clip-Cov's `edit_loss_logps`, KL-Cov's `loss_term`, the
divergence's `reference_samples_term` (fkl / js, on samples drawn once from the initial policy) and REINVENT's
`objective_term`; maxent's entropy term is its method object driving an `EntropyBonus` through the object's own
`before_loss` / `loss_term` (TRL's part of the rule, which TRL's loss runs in the trainer, is
`divrl.toy.trl_entropy`). FlowRL's method object needs the model's log Z head, so the toy runs its loss,
`divrl.core.trajectory_balance_loss`, with one learnable log Z scalar per member and prompt; the population uses
`divrl.core` directly. The methods' settings are read one way: from the run's resolved `toy_method_args`.
All seeds (and population members) train together as one batch of independent policies, each seed
with its own random generator, so a seed's run does not depend on which other seeds share the batch.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, get_type_hints

import numpy as np
import torch

from divrl.core import (
    AdaptiveEntropyCoefficient,
    LeaderClusters,
    average_state_dicts,
    distinct_outcomes,
    empirical_distribution,
    group_advantages,
    ips_scale_exact,
    kl_divergence,
    l1_distance,
    masked_mean,
    mean_pairwise_cosine_distance,
    outcome_entropy,
    per_token_divergence,
    perturb_relative_,
    select_top,
    selection_scores,
    trajectory_balance_loss,
)
from divrl.core.ips import distinct_outcomes_per_group
from divrl.methods import (
    REGISTRY,
    AdvantageStep,
    LossContext,
    LossStep,
    RewardStep,
    Stage,
    active,
    config_classes,
    presets_of,
)
from divrl.methods._fields import Unset
from divrl.methods.hooks import TaskHooks
from divrl.methods.maxent_entropy import MaxEntEntropy, TRLEntropyControl, parse_entropy_target
from divrl.toy.envs import IDEA_OUTCOMES, IdeaEnv, TabularEnv
from divrl.toy.methods import Method, components
from divrl.toy.options import (
    TOY_DERIVED,
    TOY_INERT,
    TOY_METHOD_DEFAULTS,
    TRAIN_OPTIONS,
    TRAINER_FLAGS,
    flag,
    method_flags,
)
from divrl.toy.policies import IdeaPolicy, Params, Policy, Rollout, TabularPolicy
from divrl.toy.trl_entropy import adaptive_step, applied_coefficient

# Recorded for every method; token_entropy / entropy_alpha show what maxent's entropy controller sees and does.
CONTROLLER_METRICS = ("token_entropy", "entropy_alpha")
TABULAR_METRICS = ("l1_to_target", "kl_to_target", "max_outcome_prob", "distinct_outcomes", "outcome_freqs",
                   "pass_at_k", *CONTROLLER_METRICS)
IDEA_METRICS = ("mean_reward", "max_reward", "diversity", "complexity", "outcomes_per_group", *CONTROLLER_METRICS)
FINAL_WINDOW = 10  # "final" metrics average the last 10 steps (the execution-rewards paper's protocol)
ENTROPY_CONTROLLERS = ("default", "dual", "trl")

Env = TabularEnv | IdeaEnv


@dataclass(frozen=True)
class ToyOptions:
    """The toy's own hyper-parameters (component ones are ignored when the component is off) and the divrl method
    fields set for the run (`method_fields`, by `DivRLConfig` name)."""

    steps: int
    group_size: int
    lr: float
    optimizer: str = "adam"  # adam | sgd (plain gradient steps: the gradient flow of the IPS paper's theorems)
    updates_per_batch: int = 1  # clipped gradient steps on each sampled batch (PPO/GRPO "mu")
    clip: float = 0.2  # PPO ratio clip; flowrl: clip of its sequence-level importance weight (FlowRL's 0.2)
    adv_scale: str = "group"  # group_advantages scaling: group std, batch std or none
    kl_coef: float = 0.0  # reverse-KL (k3) weight toward the initial policy
    reference_samples: int = 256  # samples per member drawn once from the initial policy for fkl / js
    entropy_coef: float = 0.0  # fixed entropy bonus (the IPS paper regularises every hyper-grid method)
    # maxent: 'dual' (MaxEnt's dual descent) or 'trl' (TRL's use_adaptive_entropy rule with its GRPOConfig defaults,
    # `divrl.toy.trl_entropy`), either toward maxent_entropy_target; 'default': as the LLM trainer, TRL's rule for
    # 'auto' and dual descent for a number
    entropy_controller: str = "default"
    ips_exact: bool = False  # tabular only: divide by the exact outcome probability, not the group frequency
    ips_outcome: str = "peak"  # ideas only: what counts as one outcome for IPS (envs.IDEA_OUTCOMES)
    clip_high: float = 0.28  # clip-higher: upper ratio clip (DAPO's 0.28, TRL's epsilon_high)
    top_entropy_quantile: float = 0.2  # top-entropy: share of a member's tokens, by entropy, the loss keeps (TRL's)
    method_fields: dict[str, Any] = field(default_factory=dict)  # DivRLConfig method field -> value for this run


class TrainConfig(ToyOptions):
    """A toy run's settings: the toy's own options and, as keywords, any registered divrl method field by its
    `DivRLConfig` name but those the toy derives (TOY_DERIVED), never reads (TOY_INERT) or lets a `--methods` label
    switch on (`labelled_switches`). A run reads the method fields from `toy_method_args` only, which resolves them
    (`method_value`) with its components' variants over them; the methods' own `validate` checks them."""

    def __init__(self, *args: Any, **values: Any) -> None:
        own = {spec.name for spec in fields(ToyOptions)}
        given = {name: values.pop(name) for name in list(values) if name not in own}
        given = {**values.pop("method_fields", {}), **given}
        super().__init__(*args, **values, method_fields=given)
        self._check()

    def _check(self) -> None:
        """Raise a ValueError naming each bad option's flag: the toy's rules, then the methods' own checks."""
        positive, non_negative, at_least_one = "> 0", ">= 0", ">= 1"
        rules = {  # field -> (valid?, requirement)
            "steps": (self.steps >= 1, at_least_one), "group_size": (self.group_size >= 2, ">= 2"),
            "lr": (math.isfinite(self.lr) and self.lr > 0, positive),
            "updates_per_batch": (self.updates_per_batch >= 1, at_least_one),
            "clip": (math.isfinite(self.clip) and self.clip > 0, positive),
            "kl_coef": (math.isfinite(self.kl_coef) and self.kl_coef >= 0, non_negative),
            "reference_samples": (self.reference_samples >= 1, at_least_one),
            "entropy_coef": (math.isfinite(self.entropy_coef) and self.entropy_coef >= 0, non_negative),
            "entropy_controller": (self.entropy_controller in ENTROPY_CONTROLLERS,
                                   "one of " + ", ".join(ENTROPY_CONTROLLERS)),
            "ips_outcome": (self.ips_outcome in IDEA_OUTCOMES, "one of " + ", ".join(IDEA_OUTCOMES)),
            "clip_high": (math.isfinite(self.clip_high) and self.clip_high > 0, positive),
            "top_entropy_quantile": (0 < self.top_entropy_quantile <= 1, "in (0, 1]"),
            "optimizer": (self.optimizer in ("adam", "sgd"), "adam or sgd"),
            "adv_scale": (self.adv_scale in ("group", "batch", "none"), "group, batch or none"),
        }
        problems = [f"{option_flag(name)} must be {rule}, got {getattr(self, name)!r}"
                    for name, (ok, rule) in rules.items() if not ok]
        if problems:
            raise ValueError("; ".join(problems))
        specs = method_fields()
        unknown = sorted(set(self.method_fields) - specs.keys())
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(unknown)}: a toy run takes the toy's options and the "
                             "registered divrl methods' DivRLConfig fields")
        derived = sorted(set(self.method_fields) & set(TOY_DERIVED))
        if derived:
            raise ValueError(f"{', '.join(derived)} are set by the toy from its environment and --ips-outcome")
        inert = sorted(set(self.method_fields) & TOY_INERT.keys())
        if inert:
            raise ValueError("; ".join(f"{name} has no effect on the toy: {TOY_INERT[name]}" for name in inert))
        switches = labelled_switches()
        switched = sorted(set(self.method_fields) & switches.keys())
        if switched:
            raise ValueError("; ".join(f"{name} is set by the --methods labels, not as an option: "
                                       f"{' or '.join(switches[name])} turns it on" for name in switched))
        toy_method_args(None, Method(name="grpo"), self)  # the methods' own checks of the fields, every method off

    def method_value(self, name: str) -> Any:
        """Method field `name` where its method is on: as set for the run, else the toy's value
        (`TOY_METHOD_DEFAULTS`), else its method's preset (`presets_of`), else its `DivRLConfig` default."""
        for values in (self.method_fields, TOY_METHOD_DEFAULTS, presets_of(*REGISTRY)):
            if name in values:
                return values[name]
        return _default(method_fields()[name])

    def record(self) -> dict[str, Any]:
        """The settings of all the runs for metrics.json: the toy's options, then the `method_value` of every method
        field but those each run's `--methods` labels decide (`label_decided`: a run's own are its
        `MethodRun.settings`)."""
        own = {spec.name: getattr(self, spec.name) for spec in fields(ToyOptions) if spec.name != "method_fields"}
        decided = label_decided()
        return own | {name: self.method_value(name) for name in method_fields() if name not in decided}


def option_flag(name: str) -> str:
    """The `divrl toy` flag that sets option or method field `name` (the field name for one with none: a toy option
    such as reference_samples, a method's switch or list, a TOY_DERIVED or TOY_INERT field)."""
    return flag(name) if name in TRAIN_OPTIONS or name in method_flags() else name


def labelled_switches() -> dict[str, list[str]]:
    """The on/off switch field of each method a `--methods` label turns on (ips, qd, population, flowrl) -> those
    labels: on the toy the labels alone decide them (a switch that is a setting, novelty_coef, keeps its flag)."""
    labels = method_labels()
    return {method.switch: labels[method.name] for method in REGISTRY.values()
            if method.switch and method.name in labels and get_type_hints(method.Config).get(method.switch) is bool}


def label_decided() -> set[str]:
    """The method fields a run's `--methods` labels decide: the switches they turn on and their variants' settings
    (fkl: divergence 'forward_kl', clip-cov: cov_method 'clip_cov')."""
    return set(labelled_switches()) | {name for component in components().values() for name in component.settings}


def method_labels() -> dict[str, list[str]]:
    """Each method a `--methods` label turns on -> those labels."""
    labels: dict[str, list[str]] = defaultdict(list)
    for label, component in components().items():
        for name in component.methods:
            labels[name].append(label)
    return dict(labels)


def method_fields() -> dict[str, Any]:
    """Every registered method's `DivRLConfig` field: name -> dataclass field."""
    return {spec.name: spec for cls in config_classes() for spec in fields(cls)}


def _default(spec: Any) -> Any:
    """A dataclass field's default (a preset's `Unset` marker gives its value)."""
    value = spec.default_factory() if spec.default is MISSING else spec.default
    return value.value if isinstance(value, Unset) else value


@dataclass
class MethodRun:
    """Per-seed curves of one method: metric -> array (seeds, steps) or (seeds, steps, k)."""

    method: str
    seeds: list[int]
    curves: dict[str, np.ndarray]
    settings: dict[str, Any] = field(default_factory=dict)  # the resolved fields of the divrl methods it ran
    final_distribution: np.ndarray | None = None  # tabular: (seeds, O), mean over the final window
    complexity_early: np.ndarray | None = None  # ideas: ||x|| of the first window's ideas, seeds pooled
    complexity_late: np.ndarray | None = None


class Trainer:
    """State of one method's run over all seeds: policy members, optimiser, per-member core objects."""

    def __init__(self, env: Env, method: Method, cfg: TrainConfig, seeds: list[int]) -> None:
        if cfg.ips_exact and isinstance(env, IdeaEnv):
            raise ValueError("--ips-exact needs a tabular environment (bandit, multiplicity, hypergrid): "
                             "ideas are continuous, their outcome probability is not known exactly")
        self.env, self.method, self.cfg, self.seeds = env, method, cfg, seeds
        # The divrl methods' fields of this run, checked by the methods (`divrl.methods`).
        self.method_args = args = toy_method_args(env, method, cfg)
        self.members = args.population_size if args.population else 1
        num = len(seeds) * self.members
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        member_generators = [g for g in self.generators for _ in range(self.members)]  # each member's seed's
        if isinstance(env, IdeaEnv):
            self.policy: Policy = IdeaPolicy(env, num, member_generators)
            self.batch = env.num_prompts * cfg.group_size
        else:
            self.policy = TabularPolicy(env, num)
            self.batch = cfg.group_size
        self.params: Params = self.policy.params
        self.reference: Params = {k: v.detach().clone() for k, v in self.params.items()}
        # flowrl: FlowRL's log Z(x) head reduced to one learnable scalar per member and prompt (the tabular
        # envs have one prompt), trained with the policy by the same optimiser; a population soups it too.
        prompts = env.num_prompts if isinstance(env, IdeaEnv) else 1
        self.log_z = torch.nn.Parameter(torch.zeros(num, prompts))
        self.trainable: Params = {**self.params, "log_z": self.log_z} if args.flowrl else self.params
        optimizer = torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.SGD
        self.optimizer = optimizer(list(self.trainable.values()), lr=cfg.lr)
        # Each member's objects of the divrl methods it runs (`divrl.methods`): the LLM trainer's own, with their state.
        hooks = TaskHooks(behavior_dims=len(env.archive_dims))
        self.member_methods = [{m.name: m(self.method_args, hooks) for m in active(self.method_args)}
                               for _ in range(num)]
        for methods, generator in zip(self.member_methods, member_generators, strict=True):
            if "cov" in methods:  # Clip-Cov draws its tokens with the member's seed's generator
                methods["cov"].generator = generator
        # maxent: each member's MaxEnt entropy method object (None without it) and the loss context it drives TRL's
        # entropy bonus through (TRL's part of the rule: `divrl.toy.trl_entropy`)
        self.entropy_methods = [self._entropy_method(methods) for methods in self.member_methods]
        self.loss_contexts = [_toy_loss_context(cfg) for _ in range(num)]
        self._first_pass: tuple[torch.Tensor, torch.Tensor] | None = None  # the latest batch's token entropies, mask
        self.clusters = [LeaderClusters(args.semantic_threshold) for _ in range(num)]  # semantic keys of the metrics
        self._keys: tuple[Rollout, torch.Tensor] | None = None  # this step's outcome keys (semantic ones are stateful)
        self.entropy = torch.zeros(num)  # mean token entropy per member of the latest batch, before its update
        self.ref_rollout: Rollout | None = None
        if self.method_args.divergence is not None:
            self.ref_rollout = self._sample(self.reference, cfg.reference_samples)
            self.ref_logp = self.policy.evaluate(self.reference, self.ref_rollout)[0]

    def _entropy_method(self, methods: dict[str, Any]) -> MaxEntEntropy | None:
        """A member's MaxEnt entropy method object (None without maxent). `entropy_controller` 'dual' / 'trl' swaps
        its controller for the other rule at the same target, which benchmarks/toy/toy_entropy_control.py compares;
        'default' keeps the LLM trainer's choice (TRL's rule for 'auto', dual descent for a number)."""
        method = methods.get("maxent_entropy")
        if method is None or self.cfg.entropy_controller == "default":
            return method
        args = self.method_args
        target = parse_entropy_target(args.maxent_entropy_target)
        if self.cfg.entropy_controller == "dual":
            method.controller = AdaptiveEntropyCoefficient(
                target, args.maxent_alpha_lr, args.maxent_alpha_init, args.maxent_alpha_max,
                auto_scale=args.maxent_entropy_auto_scale, auto_steps=args.maxent_entropy_auto_steps)
        else:
            method.controller = TRLEntropyControl(args.maxent_entropy_auto_scale, args.maxent_entropy_auto_steps)
            method.controller.target = target  # a number: nothing to measure; None ('auto'): measured first
        return method

    def entropy_alphas(self) -> list[float]:
        """Each member's entropy coefficient after the latest step (0 without maxent): the `entropy_alpha` metric."""
        return [0.0 if method is None else method.controller.alpha for method in self.entropy_methods]

    def _entropy_coefficient(self, member: int) -> float:
        """The entropy-bonus coefficient the member's next loss applies: its MaxEnt method object sets the bonus,
        TRL's rule decides what applies (0 without maxent)."""
        method = self.entropy_methods[member]
        if method is None:
            return 0.0
        context = self.loss_contexts[member]
        method.before_loss(context)
        return applied_coefficient(context.entropy_bonus)

    def _entropy_step(self, member: int, method: MaxEntEntropy) -> None:
        """After the member's update (one optimizer step): TRL's adaptive step on its bonus, then its MaxEnt method
        object's own step on the batch's first-pass token entropies (measure 'auto', read TRL's state back, or one
        dual-descent step)."""
        assert self._first_pass is not None
        context = self.loss_contexts[member]
        adaptive_step(context.entropy_bonus, float(self.entropy[member]))
        token_entropy, mask = self._first_pass
        method.loss_term(LossStep(context=context, model=None, inputs={}, per_token_logps=token_entropy[member],
                                  entropies=token_entropy[member], mask=mask[member], entropy_mask=None,
                                  accumulation=1.0, mode="train"))
        context.metrics.clear()  # the toy records its own curves

    # -- sampling and rewards (one generator per seed) ------------------------------------------------
    def per_seed(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Split a (P, ...) tensor into one (members, ...) block per seed."""
        return list(tensor.split(self.members))

    def _sample(self, params: Params, num_samples: int) -> Rollout:
        noise = torch.cat([self.policy.draw_noise(self.members, num_samples, g) for g in self.generators])
        return self.policy.sample(params, noise)

    def _rewards(self, rollout: Rollout) -> torch.Tensor:
        parts = self.per_seed(rollout.outcomes)
        return torch.cat([self.env.sample_rewards(o, g) for o, g in zip(parts, self.generators)])

    # -- per-sample views used by the components ------------------------------------------------------
    def outcome_keys(self, rollout: Rollout) -> torch.Tensor:
        """IPS outcome of each sample (P, N): the tabular outcome id, or the ideas' `ips_outcome` key ('semantic':
        each member's leader clusters, assigned once per batch)."""
        if not isinstance(self.env, IdeaEnv):
            return rollout.outcomes
        if self.cfg.ips_outcome != "semantic":
            return self.env.outcome_key(rollout.outcomes, self.cfg.ips_outcome)
        if self._keys is None or self._keys[0] is not rollout:  # no method counted outcomes in this batch
            keys = torch.tensor([c.assign(ideas) for c, ideas in zip(self.clusters, rollout.outcomes, strict=True)])
            self._keys = (rollout, keys)
        return self._keys[1]

    def _lengths(self, rollout: Rollout) -> torch.Tensor:
        if isinstance(self.env, IdeaEnv):
            return rollout.outcomes.norm(dim=-1)  # complexity stands in for thinking length
        return rollout.lengths.float()

    # -- the method ------------------------------------------------------------------------------------
    def shaped_rewards(self, rollout: Rollout, rewards: torch.Tensor, dist: torch.Tensor | None) -> torch.Tensor:
        """Each member's task rewards through its REWARD methods (`divrl.methods`, in the trainer's order: outcome
        keys, IPS, unlikeliness, then the QD, novelty and count bonuses), the member's batch being one trainer step's
        batch: (P, N). `--ips-exact` (tabular only) divides by the exact outcome probability instead of IPS."""
        shaped = rewards
        if "ips" in self.method and self.cfg.ips_exact:
            assert dist is not None
            shaped = ips_scale_exact(rewards, torch.gather(dist, 1, rollout.outcomes), self.method_args.ips_epsilon)
        views = _BatchViews(self, rollout)
        rows = []
        for p, methods in enumerate(self.member_methods):
            reward_methods = sorted((m for m in methods.values() if m.stage is Stage.REWARD), key=lambda m: m.order)
            if not reward_methods:
                rows.append(shaped[p])
                continue
            step = RewardStep(
                rewards_per_func=shaped[p].unsqueeze(1).clone(), num_task_rewards=1, task_reward=rewards[p],
                primary=rewards[p], group=self.cfg.group_size, texts=_no_texts,
                outcome_keys=lambda p=p: views.keys()[p].tolist(),
                descriptors=lambda p=p: views.descriptors()[p].tolist(),
                prompt_keys=lambda: self._prompt_ids(rollout).tolist(),
                embeddings=lambda kind, p=p: views.embeddings()[p].float(),
                sequence_logps=lambda p=p: views.mean_logps()[p], metrics=defaultdict(list))
            for method in reward_methods:
                method.shape_rewards(step)
            if step.keys is not None:
                views.counted_keys[p] = step.keys
            rows.append(step.rewards_per_func[:, 0] + step.bonus)
        if len(views.counted_keys) == len(self.member_methods):  # the metrics read the keys the methods counted
            self._keys = (rollout, torch.tensor([views.counted_keys[p] for p in range(len(self.member_methods))]))
        return torch.stack(rows)

    def advantages(self, rollout: Rollout, shaped: torch.Tensor) -> torch.Tensor:
        """Group-relative advantages, groups of G inside each member: the ADVANTAGE methods' (length bins for
        maxent, best-of-k for passk, zero flat groups), else group normalisation."""
        flat_rewards = shaped.flatten()
        step = AdvantageStep(summed=flat_rewards, filled=flat_rewards,
                             unscorable=torch.zeros_like(flat_rewards, dtype=torch.bool),
                             lengths=self._lengths(rollout).flatten(), group=self.cfg.group_size,
                             scale_rewards=self.cfg.adv_scale)
        methods = sorted((m for m in self.member_methods[0].values() if m.stage is Stage.ADVANTAGE),
                         key=lambda m: m.order)  # stateless: one member's objects serve the whole batch
        flat = None
        for method in methods:
            flat = method.advantages(step) if flat is None else flat
        if flat is None:
            flat = group_advantages(flat_rewards, self.cfg.group_size, self.cfg.adv_scale)
        for method in methods:
            zeroed = method.zeroed_rows(step)
            if zeroed is not None:
                flat = flat.masked_fill(zeroed, 0.0)
        return flat.view_as(shaped)

    def _per_member_mean(self, token_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Sum over each sample's tokens / max length, mean over samples: (P,). A constant token
        normaliser keeps the trajectory-level gradient unbiased when episode lengths differ."""
        return ((token_values * mask).sum(-1) / mask.shape[-1]).mean(-1)

    def _prompt_ids(self, rollout: Rollout) -> torch.Tensor:
        """Prompt id of each sample (N,): the tabular envs have the single prompt 0."""
        if isinstance(self.env, IdeaEnv):
            return rollout.states
        return torch.zeros(rollout.outcomes.shape[1], dtype=torch.long)

    def trajectory_balance(self, rollout: Rollout, logp: torch.Tensor, old_logp: torch.Tensor,
                           ref_logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """FlowRL's loss per member (P,): `core.trajectory_balance_loss` averaged over the member's samples.

        r_hat = the advantages (group-normalised, after any IPS / QD / novelty shaping, as in the LLM trainer);
        the importance weight pi / pi_old, clipped by `clip`, is 1 on a batch's first inner step.
        """
        log_z = self.log_z[:, self._prompt_ids(rollout)]  # (P, N)
        loss = trajectory_balance_loss(log_z.flatten(), logp.sum(-1).flatten(), ref_logp.sum(-1).flatten(),
                                       rollout.lengths.flatten(), advantages.flatten(), self.method_args.flowrl_beta,
                                       old_logp.sum(-1).flatten(), self.cfg.clip)
        return loss.view_as(advantages).mean(-1)

    def update(self, rollout: Rollout, advantages: torch.Tensor, shaped: torch.Tensor) -> torch.Tensor:
        """Clipped policy-gradient (or flowrl: trajectory-balance; reinvent: augmented-likelihood) steps with the
        divergence and entropy terms; returns the batch's mean token entropy per member (P,) before the update."""
        cfg, method, policy, args = self.cfg, self.method, self.policy, self.method_args
        mask = rollout.mask
        reverse_kl = cfg.kl_coef > 0 and args.divergence is None
        ref_logp = None
        if reverse_kl or args.flowrl or args.reinvent:
            with torch.no_grad():
                ref_logp = policy.evaluate(self.reference, rollout)[0]
        entropy_coef = cfg.entropy_coef + torch.tensor([self._entropy_coefficient(p) for p in range(len(mask))])
        adv = advantages[..., None]
        for step in range(cfg.updates_per_batch):
            logp, token_entropy = policy.evaluate(self.params, rollout)
            member_entropy = (token_entropy * mask).sum((1, 2)) / mask.sum((1, 2))
            if step == 0:  # on-policy: the first pass gives the sampling policy's log-probs
                old_logp, entropy = logp.detach(), member_entropy.detach()
                self._first_pass = (token_entropy.detach(), mask)
            inputs = {"advantages": advantages, "completion_mask": mask.float(), "old_per_token_logps": old_logp,
                      "ref_per_token_logps": ref_logp, "divrl_rewards": shaped}
            if args.cov_method == "clip_cov":
                logp = torch.stack([methods["cov"].edit_loss_logps(self.loss_contexts[p], self._member(inputs, p),
                                                                   logp[p])
                                    for p, methods in enumerate(self.member_methods)])
            steps = [(methods, self._loss_step(p, logp, inputs)) for p, methods in enumerate(self.member_methods)]
            if args.flowrl:
                assert ref_logp is not None
                loss = self.trajectory_balance(rollout, logp, old_logp, ref_logp, advantages)
            elif args.reinvent:
                loss = torch.stack([methods["reinvent"].objective_term(member) for methods, member in steps])
            else:
                ratio = torch.exp(logp - old_logp)
                upper = cfg.clip_high if "clip-higher" in method else cfg.clip
                surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - cfg.clip, 1 + upper) * adv)
                if "top-entropy" in method:
                    surrogate = surrogate * self._high_entropy_tokens(token_entropy.detach(), mask)
                loss = -self._per_member_mean(surrogate, mask)
            if reverse_kl:
                assert ref_logp is not None
                kl = per_token_divergence(logp, ref_logp, "reverse_kl", samples_from="policy")
                loss = loss + cfg.kl_coef * self._per_member_mean(kl, mask)
            elif self.ref_rollout is not None:
                logp_on_ref = policy.evaluate(self.params, self.ref_rollout)[0]
                loss = loss + torch.stack([methods["divergence"].reference_samples_term(
                    member, logp_on_ref[p], self.ref_logp[p], self.ref_rollout.mask[p])
                    for p, (methods, member) in enumerate(steps)])
            if args.cov_method == "kl_cov":
                loss = loss + torch.stack([methods["cov"].loss_term(member) for methods, member in steps])
            loss = loss - entropy_coef * member_entropy
            self.optimizer.zero_grad(set_to_none=True)
            loss.sum().backward()
            self.optimizer.step()
        for context in self.loss_contexts:
            context.metrics.clear()  # the toy records its own curves
        return entropy

    @staticmethod
    def _member(inputs: dict[str, torch.Tensor | None], member: int) -> dict[str, torch.Tensor]:
        """One member's slice of the batch's (P, ...) loss inputs (those present)."""
        return {name: value[member] for name, value in inputs.items() if value is not None}

    def _loss_step(self, member: int, logp: torch.Tensor, inputs: dict[str, torch.Tensor | None]) -> LossStep:
        """The `LossStep` a member's LOSS and OBJECTIVE method objects read: its batch is one trainer micro-batch,
        every update one optimizer step (no gradient accumulation)."""
        return LossStep(context=self.loss_contexts[member], model=None, inputs=self._member(inputs, member),
                        per_token_logps=logp[member], entropies=None, mask=inputs["completion_mask"][member],
                        entropy_mask=None, accumulation=1.0, mode="train")

    def _high_entropy_tokens(self, token_entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per member, its tokens whose entropy is at or above the (1 - top_entropy_quantile) quantile of its
        batch's tokens, as TRL's `top_entropy_quantile` selects them: (P, N, T) floats, 1 where kept."""
        keep = torch.zeros_like(token_entropy)
        for p in range(len(token_entropy)):
            threshold = torch.quantile(token_entropy[p][mask[p] > 0], 1 - self.cfg.top_entropy_quantile)
            keep[p] = (token_entropy[p] >= threshold).float()
        return keep

    @torch.no_grad()
    def population_step(self, rollout: Rollout, rewards: torch.Tensor) -> None:
        """Per seed: score members S_k = d_k (1 + max R_k), soup the top M, restart all K from it + noise
        (flowrl's log Z included: it belongs to its member's policy)."""
        args, k = self.method_args, self.members
        keys = rollout.outcomes
        for s, generator in enumerate(self.generators):
            block = range(s * k, (s + 1) * k)
            if isinstance(self.env, IdeaEnv):
                diversity = [mean_pairwise_cosine_distance(keys[m]) for m in block]
            else:
                support = range(self.env.num_outcomes)
                diversity = [outcome_entropy(empirical_distribution(keys[m].tolist(), support)) for m in block]
            scores = selection_scores(torch.tensor(diversity), rewards[s * k : (s + 1) * k].max(dim=1).values)
            top = select_top(scores, args.population_top_m)
            soup = average_state_dicts([{n: p[s * k + m] for n, p in self.trainable.items()} for m in top])
            for name, param in self.trainable.items():
                param[s * k : (s + 1) * k] = soup[name]
            # Each member's copy of each tensor moves by exactly population_sigma x the soup tensor's norm.
            perturb_relative_([param[s * k + m] for m in range(k) for param in self.trainable.values()],
                              args.population_sigma, generator)

    def step(self, step: int) -> tuple[Rollout, torch.Tensor, torch.Tensor | None]:
        """One sample-score-update iteration; returns the batch, its rewards and the pre-update distribution."""
        rollout = self._sample(self.params, self.batch)
        rewards = self._rewards(rollout)
        dist = self.policy.outcome_distribution(self.params) if isinstance(self.policy, TabularPolicy) else None
        shaped = self.shaped_rewards(rollout, rewards, dist)
        self.entropy = self.update(rollout, self.advantages(rollout, shaped), shaped)
        for member, method in enumerate(self.entropy_methods):
            if method is not None:
                self._entropy_step(member, method)
        if self.method_args.population and (step + 1) % self.method_args.population_interval == 0:
            self.population_step(rollout, rewards)
        return rollout, rewards, dist


@dataclass
class TrainerFields:
    """The GRPOConfig fields the methods' `validate` reads, at what a toy run amounts to: groups of `num_generations`
    samples scaled by `scale_rewards`, `num_iterations` passes over each batch, one generation per step and no vLLM.
    The toy's fixed entropy bonus is its own term: TRL's `entropy_coef`, which maxent drives, stays 0."""

    num_generations: int = 2
    scale_rewards: str = "group"
    num_iterations: int = 1
    gradient_accumulation_steps: int = 1
    steps_per_generation: int = 1
    use_vllm: bool = False
    vllm_importance_sampling_correction: bool = False
    vllm_importance_sampling_mode: str = "sequence_mask"
    multi_objective_aggregation: str = "sum_then_normalize"
    use_adaptive_entropy: bool = False
    entropy_coef: float = 0.0
    entropy_target: float = 0.0
    temperature: float = 1.0


def toy_method_args(env: Env | None, method: Method, cfg: TrainConfig) -> Any:
    """The `divrl.methods` fields of a toy run, checked by every registered method's `validate` (errors name the
    `divrl toy` flag): each field at `cfg.method_value`, its components' variant settings over it (a different value
    set for the run, which would change nothing, is refused: fkl with --divergence js), except the switch of a method
    that a component label could turn on and this run's do not (its default: off); `env` (None: no environment yet)
    and the toy's options set the TOY_DERIVED fields."""
    switched, settings = method.switched(), method.variants()
    overridden = {name: value for name, value in cfg.method_fields.items()
                  if name in settings and value != settings[name]}
    if overridden:
        raise ValueError("; ".join(f"{option_flag(name)} {value!r} has no effect with --methods {method.name}, which "
                                   f"sets {name} to {settings[name]!r}" for name, value in overridden.items()))
    labelled = method_labels().keys()
    values: dict[str, Any] = {}
    for registered in REGISTRY.values():
        for spec in fields(registered.Config):
            off = spec.name == registered.switch and (registered.name in labelled - switched
                                                      or not registered.runs_on_toy)
            values[spec.name] = (_default(spec) if off else settings[spec.name] if spec.name in settings
                                 else cfg.method_value(spec.name))
    semantic = isinstance(env, IdeaEnv) and cfg.ips_outcome == "semantic"
    values["ips_outcome_key"] = "semantic" if semantic else "task"
    values["ips"] = values["ips"] and not cfg.ips_exact  # --ips-exact divides by the exact probability instead
    if env is not None:
        values["qd_dims"], values["qd_ranges"] = list(env.archive_dims), [list(r) for r in env.archive_ranges]
    args_class = dataclass(type("ToyMethodArgs", (*config_classes(), TrainerFields), {}))
    args = args_class(**values, num_generations=cfg.group_size, scale_rewards=cfg.adv_scale,
                      num_iterations=cfg.updates_per_batch)
    try:
        for registered in REGISTRY.values():
            registered.validate(args)
    except ValueError as error:
        raise ValueError(_toy_flags(str(error))) from None
    return args


def _toy_flags(message: str) -> str:
    """A method's validation message in the toy's words: `DivRLConfig.<field>` and the GRPOConfig fields a toy option
    stands for become their `divrl toy` flags."""
    message = re.sub(r"DivRLConfig\.(\w+)", lambda match: option_flag(match.group(1)), message)
    return re.sub(r"\b(" + "|".join(TRAINER_FLAGS) + r")\b", lambda match: TRAINER_FLAGS[match.group(1)], message)


class _OneProcess:
    """The accelerator under a toy policy's loss context: one process, and every update an optimizer step."""

    sync_gradients = True
    process_index, num_processes = 0, 1
    device = torch.device("cpu")

    @staticmethod
    def reduce(tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor


def _no_model_forward(*_: Any) -> Any:
    raise ValueError("the toy policies have no language-model forward: a LOSS method that runs one (divergence "
                     "rehearsal, FlowRL's prompt pass) runs on the LLM trainer only")


def _toy_loss_context(cfg: TrainConfig) -> LossContext:
    """One toy policy's `LossContext`: what the LOSS method objects it runs may use (TRL's clip is the toy's)."""
    return LossContext(accelerator=_OneProcess(), metrics=defaultdict(lambda: defaultdict(list)),
                       policy_logps=_no_model_forward, causal_lm=_no_model_forward, pad_token_id=None,
                       epsilon_low=cfg.clip, epsilon_high=cfg.clip, loss_type="grpo")


def _no_texts() -> list[str]:
    raise ValueError("the toy environments have no completion texts: a method that reads them runs on the LLM "
                     "trainer only")


class _BatchViews:
    """One batch's per-sample views the REWARD methods ask for, computed once on first use: (P, N, ...) each."""

    def __init__(self, trainer: Trainer, rollout: Rollout) -> None:
        self.trainer, self.rollout = trainer, rollout
        self.counted_keys: dict[int, list] = {}
        self._cache: dict[str, torch.Tensor] = {}

    def _get(self, name: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        if name not in self._cache:
            self._cache[name] = compute()
        return self._cache[name]

    def keys(self) -> torch.Tensor:
        """IPS outcome of each sample: the tabular outcome id, or the ideas' `ips_outcome` key."""
        trainer, rollout = self.trainer, self.rollout
        if not isinstance(trainer.env, IdeaEnv):
            return rollout.outcomes
        return self._get("keys", lambda: trainer.env.outcome_key(rollout.outcomes, trainer.cfg.ips_outcome))

    def descriptors(self) -> torch.Tensor:
        env, outcomes = self.trainer.env, self.rollout.outcomes
        return self._get("descriptors", lambda: env.behaviour(outcomes) if isinstance(env, IdeaEnv)
                         else env.descriptors[outcomes])

    def embeddings(self) -> torch.Tensor:
        """The ideas themselves, or a tabular outcome's descriptor (the toys' embedding of any kind)."""
        env, outcomes = self.trainer.env, self.rollout.outcomes
        return outcomes if isinstance(env, IdeaEnv) else env.descriptors[outcomes]

    @torch.no_grad()
    def mean_logps(self) -> torch.Tensor:
        trainer = self.trainer
        return self._get("mean_logps", lambda: masked_mean(
            trainer.policy.evaluate(trainer.params, self.rollout)[0], self.rollout.mask, -1))


def _tabular_metrics(env: TabularEnv, dist: torch.Tensor, outcomes: torch.Tensor, k: int) -> dict[str, object]:
    """Metrics of one seed: `dist` is its (population-mixture) exact outcome distribution before the update;
    pass_at_k = P(one of k samples reaches the best reward) = 1 - (1 - p_best)^k."""
    target = env.target
    best = float(dist[env.outcome_rewards == env.outcome_rewards.max()].sum())
    return {
        "l1_to_target": l1_distance(dist, target),
        "kl_to_target": kl_divergence(target, dist),  # KL(p* || pi): large when a target mode is missed
        "max_outcome_prob": float(dist.max()),
        "distinct_outcomes": distinct_outcomes(outcomes.flatten().tolist()),
        "outcome_freqs": env.outcome_freqs(dist).tolist(),
        "pass_at_k": 1 - (1 - best) ** k,
    }


def _idea_metrics(ideas: torch.Tensor, rewards: torch.Tensor, keys: torch.Tensor, group_size: int) -> dict[str, object]:
    """Metrics of one seed over all its members' ideas of the step; `keys` are their IPS outcomes."""
    flat = ideas.flatten(0, -2)
    return {
        "mean_reward": float(rewards.mean()),
        "max_reward": float(rewards.max()),
        "diversity": mean_pairwise_cosine_distance(flat),
        "complexity": float(flat.norm(dim=-1).mean()),
        "outcomes_per_group": float(distinct_outcomes_per_group(keys.flatten().tolist(), group_size).float().mean()),
    }


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread: toy tensors are so small that intra-op threading only adds sync cost."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train(
    env: Env,
    method: Method | str,
    cfg: TrainConfig,
    seeds: list[int],
    progress: Callable[[int, int], None] | None = None,
) -> MethodRun:
    """Train `method` on `env` for every seed at once and record its per-step metric curves."""
    if isinstance(method, str):
        method = Method.parse(method)
    if not seeds:
        raise ValueError("need at least one seed")
    with single_thread():
        return _train(env, method, cfg, seeds, progress)


def _train(
    env: Env, method: Method, cfg: TrainConfig, seeds: list[int], progress: Callable[[int, int], None] | None
) -> MethodRun:
    trainer = Trainer(env, method, cfg, seeds)
    tabular = isinstance(env, TabularEnv)
    names = TABULAR_METRICS if tabular else IDEA_METRICS
    history: dict[str, list[list[object]]] = {name: [[] for _ in seeds] for name in names}
    window = min(FINAL_WINDOW, cfg.steps)
    pass_k = cfg.method_value("passk")  # the pass_at_k metric's k, --passk, whether or not the passk method is on
    final_dist = torch.zeros(len(seeds), env.num_outcomes, dtype=torch.float64) if tabular else None
    early: list[torch.Tensor] = []
    late: list[torch.Tensor] = []
    for step in range(cfg.steps):
        rollout, rewards, dist = trainer.step(step)
        alphas = torch.tensor(trainer.entropy_alphas())
        blocks = zip(trainer.per_seed(rollout.outcomes), trainer.per_seed(rewards),
                     trainer.per_seed(dist) if dist is not None else [None] * len(seeds),
                     trainer.per_seed(trainer.outcome_keys(rollout)), trainer.per_seed(trainer.entropy),
                     trainer.per_seed(alphas))
        for s, (outcomes, seed_rewards, member_dists, keys, entropy, alpha) in enumerate(blocks):
            if tabular:
                assert member_dists is not None and final_dist is not None
                seed_dist = member_dists.mean(0).double()  # the population's mixture for pop
                values = _tabular_metrics(env, seed_dist, outcomes, pass_k)
                if step >= cfg.steps - window:
                    final_dist[s] += seed_dist / window
            else:
                values = _idea_metrics(outcomes, seed_rewards, keys, cfg.group_size)
            values |= {"token_entropy": float(entropy.mean()), "entropy_alpha": float(alpha.mean())}
            for name in names:
                history[name][s].append(values[name])
        if not tabular:
            norms = rollout.outcomes.norm(dim=-1).flatten()
            if step < window:
                early.append(norms)
            if step >= cfg.steps - window:
                late.append(norms)
        if progress is not None:
            progress(step + 1, cfg.steps)
    curves = {name: np.asarray(values, dtype=float) for name, values in history.items()}
    args = trainer.method_args
    return MethodRun(
        method=method.name,
        seeds=list(seeds),
        curves=curves,
        settings={spec.name: getattr(args, spec.name) for active_method in active(args)
                  for spec in fields(active_method.Config)},
        final_distribution=None if final_dist is None else final_dist.numpy(),
        complexity_early=torch.cat(early).numpy() if early else None,
        complexity_late=torch.cat(late).numpy() if late else None,
    )
