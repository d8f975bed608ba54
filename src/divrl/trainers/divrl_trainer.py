"""`DivRLTrainer`: TRL's GRPOTrainer plus any subset of IPS, QD, MaxEnt and divergence regularisation.

Where each method hooks into TRL (trl 1.16):
- IPS scaling, archive and novelty bonuses: `_calculate_rewards`, on the GLOBAL (gathered) batch in group
  order, before TRL normalises and shuffles. Bonuses go into an extra reward column `divrl_bonus`
  (weight 1), the way TRL adds environment rewards, so TRL logs them and aggregates them exactly.
- Unlikeliness reward: `_calculate_rewards` with IPS, from the sequences `_generate` returned (their mean
  log-probs: the sampler's own (vLLM's, or `cpu_sample`'s on the CPU) or, without them, one no-grad forward).
- Length-conditional and pass@k advantages: `_generate_and_score_completions`, recomputed on the global batch
  and sliced back to this process exactly as TRL slices advantages.
- Entropy: TRL's entropy bonus, its `entropy_coef` driven by MaxEnt's controller before every loss: with
  `maxent_entropy_target: auto` TRL's own adaptive controller toward the measured start's entropy (each policy's TRL
  state swapped in), with a number the execution-rewards paper's dual descent (`divrl.core.AdaptiveEntropyCoefficient`).
  Both measure the entropy of the tokens the bonus acts on (TRL's top-entropy tokens when `top_entropy_quantile` < 1).
- Divergence: `_compute_loss`, from the per-token log-probs TRL's loss forward already computed (captured,
  not recomputed), aggregated like TRL's entropy bonus (masked token mean / gradient-accumulation steps).
- Clip-Cov: the loss forward's log-probs are detached on the selected tokens (`_get_per_token_logps_and_entropies`
  while TRL's loss runs), which stops their policy gradient; KL-Cov: a term added in `_compute_loss`.
- FlowRL (the OBJECTIVE stage): `_compute_loss` runs TRL's loss on zeroed advantages and adds the trajectory-balance
  loss instead of GRPO's surrogate (`divrl.methods.flowrl`).
- Population: a controller (`divrl.trainers.population.Population`) activates each member before it generates and
  runs selections from a callback.
Each method is one file of `divrl.methods`, running in the stages above in a fixed order; the algorithms live in
`divrl.core`. This class is TRL's GRPOTrainer with each hook overridden once, as the sequence of stages; the CPU
kernels and stop strings are patches of the model (`divrl.backends`) installed and undone explicitly.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from accelerate.utils import gather, gather_object, is_peft_model
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import use_adapter

from divrl.backends.cpu import CPUKernels, Undo, unwrapped_causal_lm
from divrl.backends.stop_strings import StopStrings, log_stop_metrics, resolve_stop_strings, vllm_stop_kwargs
from divrl.core import (
    distinct_outcomes,
    flat_groups,
    hashed_ngram_embedding,
    masked_mean,
    mean_pairwise_cosine_distance,
    vendi_score_of_embeddings,
    vendi_score_of_keys,
)
from divrl.methods import (
    AdvantageStep,
    EntropyBonus,
    LossContext,
    LossStep,
    Method,
    RewardStep,
    Stage,
    active,
    load_method_states,
    method_states,
)
from divrl.methods.hooks import TaskHooks, hook_columns, resolve_task_hooks
from divrl.methods.qd import GLOBAL_ARCHIVE  # noqa: F401 (re-exported: the key of the one global archive)
from divrl.methods.rehearsal import pad_prompt_completion
from divrl.quiet import upstream_deprecations_silenced
from divrl.task import completion_text, prompt_key
from divrl.trainers.checkpoint import CheckpointPolicy
from divrl.trainers.config import DivRLConfig
from divrl.trainers.console_log import use_compact_console
from divrl.trainers.fsdp import save_gathered_weights, saves_no_weights
from divrl.trainers.model_card import model_card_identity, write_model_card
from divrl.trainers.population import Population
from divrl.trainers.reference_model import load_reference_model
from divrl.trainers.task_stop import TaskStopCallback

logger = logging.getLogger(__name__)

BONUS_REWARD_NAME = "divrl_bonus"
# Keys of TRL's generation output that `_get_per_token_logps_and_entropies` takes (multimodal inputs).
_FORWARD_KEYS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes",
                 "num_tiles", "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")


@contextlib.contextmanager
def activation_checkpointing_off(model: Any, kwargs: dict[str, Any] | None) -> Iterator[None]:
    """Activation checkpointing off for the block, then back as it was with `kwargs` (the ones TRL keeps in
    `args.gradient_checkpointing_kwargs`, where it forces use_reentrant under DeepSpeed ZeRO-3): TRL's
    `disable_gradient_checkpointing` by the method names transformers 5 reads (TRL's deprecated ones warn at every
    call)."""
    was_on = model.is_activation_checkpointing
    if was_on:
        model.activation_checkpointing_disable()
    try:
        yield
    finally:
        if was_on:
            model.activation_checkpointing_enable(kwargs)


@dataclass
class StepScratch:
    """What one TRL hook of a step hands to a later hook of the same step, in one object that lives only as long.

    A step here is one of the two hooks whose inner calls hand things on, and `DivRLTrainer._scratch` holds the
    object only while that hook runs (created at its start, dropped at its end, so nothing outlives it):
    - a generation batch (`_generate_and_score_completions`, training or evaluation): `_generate` keeps the sampled
      sequences for `_sequence_logps` (unlikeliness), `_calculate_rewards` keeps the global batch's rewards and
      completion lengths for the ADVANTAGE methods;
    - one micro-batch's loss (`_compute_loss`, once per micro-batch with gradient accumulation and per iteration
      with num_iterations > 1): while TRL's loss runs (`loss_inputs` set) its forward and its entropy mask are
      captured for the LOSS and OBJECTIVE methods.
    TRL never runs one inside the other; a population switches members before a generation and scores them after
    an optimizer step, outside both, so each member's batch is handed on within its own step.
    """

    # generation batch
    generated: tuple[list, list, list | None] | None = None  # prompt ids, completion ids, sampler log-probs
    rewards_per_func: torch.Tensor | None = None  # the global batch's reward columns, after shaping
    task_rewards: torch.Tensor | None = None  # the global batch's weighted task reward, before shaping (NaN: unscored)
    lengths: torch.Tensor | None = None  # the global batch's completion lengths (ADVANTAGE methods that need them)
    # one micro-batch's loss
    loss_inputs: dict[str, Any] | None = None  # the micro-batch TRL's loss is computing; None: nothing captured
    loss_forward: tuple | None = None  # TRL's loss forward: per-token log-probs, entropies, aux loss
    entropy_mask: torch.Tensor | None = None  # the tokens TRL's loss and entropy bonus act on

    @property
    def capturing(self) -> bool:
        """Whether TRL's loss is running, so that its forward and entropy mask are captured."""
        return self.loss_inputs is not None


class DiversityState:
    """The enabled methods of one policy (`divrl.methods`), with what they learn during training: QD archives,
    novelty memory, entropy coefficient, outcome counts, semantic outcome classes.

    One object per policy. The trainer runs the methods of `trainer.diversity_state`; a population trainer keeps
    one per member and swaps it in before the member's steps. A method marked `shared` (a data stream, not learned
    state: the divergence's rehearsal rows) is one object for all policies. Checkpointed via `state_dict`.
    """

    def __init__(self, args: DivRLConfig, hooks: TaskHooks, shared: dict[str, Method]) -> None:
        self.methods: dict[str, Method] = {
            method.name: shared[method.name] if method.shared else method(args, hooks) for method in active(args)}

    def __getitem__(self, name: str) -> Method:
        """The enabled method registered as `name` (e.g. `state["qd"].archive()`); KeyError when it is off."""
        return self.methods[name]

    def stage(self, stage: Stage) -> list[Method]:
        """The enabled methods acting in `stage`, in the order they run."""
        return sorted((m for m in self.methods.values() if m.stage is stage), key=lambda m: m.order)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training identically (torch.save-able, weights_only-safe)."""
        return method_states(self.methods, shared=False)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict` (the enabled methods must match)."""
        load_method_states(self.methods, shared=False, state=state)


class DivRLTrainer(GRPOTrainer):
    """GRPOTrainer with the diversity methods enabled in its `DivRLConfig` (any subset, composable).

    Arguments are GRPOTrainer's, plus `task`: an object following `divrl.task.Task` whose hooks
    (`outcome_key`, `behavior`/`behavior_dims`, `embed`) feed IPS, QD and novelty, and whose
    `reward_funcs()` are used when `reward_funcs` is not given.
    """

    # Config fields a preset subclass switches on (applied to the fields the user did not set).
    preset: ClassVar[dict[str, Any]] = {}
    # The running step's hand-offs (see StepScratch); None between steps, and on objects `__init__` did not build
    # (object.__new__, a Mock with spec), on which TRL's tests and subclasses call the hooks.
    _scratch: StepScratch | None = None
    stop_strings: tuple[str, ...] = ()
    population: Population | None = None
    objective: Method | None = None
    log_z_head: torch.nn.Module | None = None  # FlowRL's log Z head (set by its method)

    def __init__(
        self,
        model: Any,
        reward_funcs: Any = None,
        args: DivRLConfig | None = None,
        *trainer_args: Any,
        task: Any = None,
        **trainer_kwargs: Any,
    ) -> None:
        if isinstance(model, os.PathLike):
            model = os.fspath(model)  # TRL loads only `str` paths
        args = self._prepare_args(model, args)
        _refuse_population_vllm_on_quantized_base(model, args, trainer_kwargs.get("quantization_config"))
        if reward_funcs is None and task is not None:
            reward_funcs = task.reward_funcs()
        self.task = task
        # Model card and model tags name the methods that ran (TRL reads these in __init__ and at every save).
        self._tag_names, self._name, self._paper = model_card_identity(args, self._tag_names, self._name, self._paper)
        self.hooks: TaskHooks = resolve_task_hooks(args, task)
        self.stop_strings = resolve_stop_strings(args, task)
        if self.stop_strings and args.use_vllm:
            args.generation_kwargs = vllm_stop_kwargs(args.generation_kwargs, self.stop_strings)
        # One object per trainer for the methods every policy shares (built before the model: a bad path fails fast)
        self.shared_methods: dict[str, Method] = {m.name: m(args, self.hooks) for m in active(args) if m.shared}
        self._model_patches: list[Undo] = []  # what divrl installed into the model, undone when `train` returns
        self.checkpoints = CheckpointPolicy(self)  # what a checkpoint holds, and which one a resume starts from
        with upstream_deprecations_silenced():  # PEFT's wrapping asks transformers' deprecated names
            super().__init__(model, reward_funcs, args, *trainer_args, **trainer_kwargs)
        self.cpu_kernels = CPUKernels(self.accelerator, args, self.temperature, self._keeps_sampled_logps())
        self.stop_backend = StopStrings(self.stop_strings, self._tokenizer, args.use_vllm)
        self._patch_model()
        if args.console_log == "compact":
            use_compact_console(self)
        if callable(getattr(task, "stop_reason", None)):
            self.add_callback(TaskStopCallback(self))

        self._num_task_rewards = len(self.reward_funcs)
        self._has_bonus_column = any(m.bonus for m in active(args))
        if self._has_bonus_column:
            self._add_bonus_column()
        self._needs_lengths = any(m.needs_lengths for m in active(args, Stage.ADVANTAGE))
        if self._needs_reference_model():
            self.ref_model = load_reference_model(self, trainer_kwargs.get("quantization_config"),
                                                  from_path=isinstance(model, str))
        self.diversity_state = self.new_diversity_state()
        for method in self.diversity_state.methods.values():
            method.configure_trainer(self)
        # a LOSS method drives TRL's entropy bonus (MaxEnt): TRL applies `entropy_coef`, handed over before each loss
        self._drives_entropy_bonus = any(m.drives_entropy_bonus(args) for m in active(args, Stage.LOSS))
        self._entropy_bonus_enabled = self._entropy_bonus_enabled or self._drives_entropy_bonus
        self.loss_context = LossContext(
            accelerator=self.accelerator, metrics=self._metrics, policy_logps=self._policy_logps,
            causal_lm=self._causal_lm, pad_token_id=self._tokenizer.pad_token_id, epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high, loss_type=self.loss_type, tokenizer=self._tokenizer,
            reference_logps=self._reference_batch_logps)
        self.objective = next((m for m in self.diversity_state.methods.values() if m.stage is Stage.OBJECTIVE), None)
        self.population = Population(self) if args.population else None

    # ----------------------------------------------------------------------------------------- setup
    def _prepare_args(self, model: Any, args: DivRLConfig | None) -> DivRLConfig:
        """Default config when none is given; a GRPOConfig becomes a DivRLConfig (every method off); apply this
        class's preset."""
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "model")
            args = DivRLConfig(output_dir=f"{Path(str(name)).name or 'model'}-DivRL")
        if isinstance(args, GRPOConfig) and not isinstance(args, DivRLConfig):
            args = _divrl_config_from(args)
        if not isinstance(args, DivRLConfig):
            raise TypeError(
                f"{type(self).__name__} needs a trl.GRPOConfig or a divrl.DivRLConfig (a GRPOConfig subclass with the "
                f"diversity fields), got {type(args).__name__}"
            )
        args.apply_preset(self.preset)  # only fields the user left unset: explicit values win, even default ones
        if args.population and args.ddp_find_unused_parameters is None:
            # Members not trained at a step are unused parameters for DDP. Trainer.__init__ builds DDP's kwargs from
            # this field, so it is set here, before; the population refuses an explicit False with several processes.
            args.ddp_find_unused_parameters = True
        return args

    def create_optimizer(self, *args: Any, **kwargs: Any):  # noqa: D102 (Trainer hook)
        if self.population is not None:
            self.population.enable_member_gradients()  # every member's factors go into the optimizer
        optimizer = super().create_optimizer(*args, **kwargs)
        if self.objective is not None:
            self.objective.add_to_optimizer(optimizer)
        return optimizer

    def new_diversity_state(self) -> DiversityState:
        """A fresh, empty method state for this config (one per policy; see DiversityState)."""
        return DiversityState(self.args, self.hooks, self.shared_methods)

    def _add_bonus_column(self) -> None:
        """Append the `divrl_bonus` reward column (weight 1): archive + novelty bonuses land there."""

        def divrl_bonus(completions: list, **_: Any) -> list[float]:
            return [0.0] * len(completions)  # filled in `_calculate_rewards` once the global batch is known

        self.reward_funcs.append(divrl_bonus)
        self.reward_func_names.append(BONUS_REWARD_NAME)
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat([self.reward_weights, torch.ones(1, dtype=self.reward_weights.dtype)])

    def _needs_reference_logps(self) -> bool:
        """Whether a loss term needs reference log-probs of the completions (TRL computes them only for beta != 0):
        the divergence on policy samples, or FlowRL's residual."""
        return any(m.needs_reference_logps(self.args) for m in active(self.args))

    def _needs_reference_model(self) -> bool:
        """Reference log-probs without PEFT need a frozen copy of the initial policy; TRL loads one for beta != 0."""
        return self._needs_reference_logps() and self.ref_model is None and not is_peft_model(self.model)

    @contextlib.contextmanager
    def _step_scratch(self) -> Iterator[StepScratch]:
        """A fresh `StepScratch` for the step this hook runs, dropped when it ends (whatever was there before is
        put back: None between steps)."""
        outer, self._scratch = self._scratch, StepScratch()
        try:
            yield self._scratch
        finally:
            self._scratch = outer

    # ------------------------------------------------------------------------- model patches, generation
    def _causal_lm(self, model: Any) -> Any:
        """The transformers causal LM inside the accelerate and PEFT wrappers of `model`."""
        return unwrapped_causal_lm(self.accelerator, model)

    def _patch_model(self) -> None:
        """Install divrl's patches of the causal LM (once; `train` undoes them when it returns): the CPU kernels
        and the stop criterion."""
        if not self._model_patches:
            causal_lm = self._causal_lm(self.model)
            self._model_patches = [*self.cpu_kernels.patches(causal_lm), *self.stop_backend.patches(causal_lm)]

    def _unpatch_model(self) -> None:
        """Give the user's model back as it was: every patch undone, the loss-forward head included."""
        while self._model_patches:
            self._model_patches.pop()()

    def _fast_logps_model(self, model: Any) -> Any | None:
        """The causal LM whose CPU log-prob kernel serves `model`'s loss forward, or None where TRL's path runs."""
        return self.cpu_kernels.fast_logps_model(model, self._model_patches)

    def _entropy_needs_grad(self) -> bool:
        """Whether the loss backpropagates through the entropies (TRL: only with its entropy bonus)."""
        return bool(getattr(self, "_entropy_bonus_enabled", False))

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: D102 (TRL hook)
        completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                 num_generations, has_tool_images)
        if not self.stop_strings:
            return completion_ids, logprobs
        cut_ids, logprobs, lengths = self.stop_backend.cut(completion_ids, logprobs)
        log_stop_metrics(self.accelerator, self._metrics["train" if self.model.training else "eval"], completion_ids,
                         lengths)
        return cut_ids, logprobs

    # ---------------------------------------------------------------------------------- rewards
    def task_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        """TRL's reward columns of the global batch, before any method shapes them (the population scores members
        with these, leaving archives and memories untouched)."""
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: D102 (TRL hook)
        rewards_per_func = self.task_rewards(inputs, prompts, completions, completion_ids_list)
        scratch = self._scratch
        if self._needs_lengths:
            local = torch.tensor([len(ids) for ids in completion_ids_list], device=rewards_per_func.device)
            lengths = gather(local)
            if scratch is not None:
                scratch.lengths = lengths
        if scratch is not None:
            scratch.task_rewards = self._weighted_task_reward(rewards_per_func)  # before any method's shaping
        if self.model.training:
            self._log_collapse_signals(inputs, completions, rewards_per_func)
        if self.model.training and self.diversity_state.stage(Stage.REWARD):
            rewards_per_func = self._shape_rewards(rewards_per_func, inputs, prompts, completions,
                                                   completion_ids_list)
        if self.model.training:
            self._log_groups_without_signal(rewards_per_func)
        if scratch is not None:
            scratch.rewards_per_func = rewards_per_func
        return rewards_per_func

    def _log_groups_without_signal(self, rewards_per_func: torch.Tensor) -> None:
        """Log `divrl/groups_without_signal`: the share of groups whose reward, summed as TRL sums it and after any
        shaping, is the same for every completion (max - min within 1e-6 relative), so their advantages carry no
        signal (`core.flat_groups`). TRL's `frac_reward_zero_std` tests the group std against 0 and misses such
        groups when the shared reward is not exact in fp32 (eight rewards of 1.2 have an fp32 std of ~1e-7)."""
        flat = flat_groups(self._summed_rewards(rewards_per_func).cpu(), self.num_generations)
        self._metrics["train"]["divrl/groups_without_signal"].append(flat.float().mean().item())

    def _log_collapse_signals(self, inputs: list[dict], completions: list, rewards_per_func: torch.Tensor) -> None:
        """Log every step, for every method (the GRPO baseline too), on unshaped rewards: `diversity/pairwise`
        (mean in-group pairwise cosine distance of n-gram count embeddings, in [0, 1]: 1 = no shared trigram),
        `diversity/vendi_ngram` (the Vendi score of
        those embeddings per group: the effective number of distinct completions), `reward/max` (the batch's best task
        reward), `divrl/task_reward` (its mean), `divrl/primary_reward` (mean of the first reward function:
        validity for HypoSpace) and, when the task has an `outcome_key`, `diversity/distinct_valid` (distinct
        outcomes per group among completions the first reward function scores above 0) and `diversity/vendi_valid`
        (their Vendi score: the effective number of distinct valid outcomes, weighted by frequency): the collapse
        signatures of the execution-rewards, IPS and quality-diversity papers, comparable across methods (what `divrl
        fit-law` reads)."""
        texts = [completion_text(c) for c in completions]
        all_texts = gather_object(texts)
        groups = [all_texts[i : i + self.num_generations] for i in range(0, len(all_texts), self.num_generations)]
        embeddings = [hashed_ngram_embedding(group) for group in groups]
        task_reward = self._weighted_task_reward(rewards_per_func)
        metrics = self._metrics["train"]
        metrics["diversity/pairwise"].append(
            sum(mean_pairwise_cosine_distance(e, counts=True) for e in embeddings) / len(groups))
        metrics["diversity/vendi_ngram"].append(sum(map(vendi_score_of_embeddings, embeddings)) / len(groups))
        if torch.isnan(task_reward).all():
            return
        metrics["reward/max"].append(task_reward[~torch.isnan(task_reward)].max().item())
        metrics["divrl/task_reward"].append(torch.nanmean(task_reward).item())
        primary = rewards_per_func[:, 0]
        metrics["divrl/primary_reward"].append(torch.nanmean(primary).item())
        if self.hooks.task_outcome_key is not None:
            offset = self.accelerator.process_index * len(texts)  # rewards are global, completions local
            local = primary[offset : offset + len(texts)].tolist()
            keys = [self.hooks.task_outcome_key(t, **hook_columns(row)) if r > 0 else None
                    for t, row, r in zip(texts, inputs, local, strict=True)]
            keys = gather_object(keys)
            groups = [keys[i : i + self.num_generations] for i in range(0, len(keys), self.num_generations)]
            metrics["diversity/distinct_valid"].append(sum(map(distinct_outcomes, groups)) / len(groups))
            metrics["diversity/vendi_valid"].append(sum(map(vendi_score_of_keys, groups)) / len(groups))

    def _summed_rewards(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Each row's reward as TRL sums it for the advantages: every column weighted, NaN counted as 0."""
        return (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(dim=1)

    def _weighted_task_reward(self, rewards_per_func: torch.Tensor) -> torch.Tensor:
        """Weighted sum of the task's reward columns as TRL sums them; NaN where every column is NaN."""
        task = rewards_per_func[:, : self._num_task_rewards]
        weights = self.reward_weights[: self._num_task_rewards].to(task.device)
        total = (task * weights.unsqueeze(0)).nansum(dim=1)
        return total.masked_fill(torch.isnan(task).all(dim=1), math.nan)

    def _shape_rewards(self, rewards_per_func, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        """Run the REWARD methods on the global batch (train mode only): they scale the task columns and fill the
        bonus column."""
        rewards_per_func = rewards_per_func.clone()
        texts = [completion_text(c) for c in completions]
        columns = [hook_columns(row) for row in inputs]
        def per_completion(hook: Any) -> list:  # a task hook on this process's completions, gathered
            return gather_object([hook(t, **c) for t, c in zip(texts, columns, strict=True)])

        step = RewardStep(
            rewards_per_func=rewards_per_func, num_task_rewards=self._num_task_rewards,
            task_reward=self._weighted_task_reward(rewards_per_func).cpu(),
            primary=rewards_per_func[:, 0].cpu(),  # the task's own score (validity for HypoSpace), before shaping
            group=self.num_generations, texts=lambda: gather_object(texts),
            outcome_keys=lambda: per_completion(self.hooks.outcome_key),
            descriptors=lambda: per_completion(self.hooks.behavior),
            prompt_keys=lambda: gather_object([prompt_key(p) for p in prompts]),
            embeddings=lambda kind: self._global_embeddings(kind, texts, columns, completion_ids_list),
            sequence_logps=self._sequence_logps, metrics=self._metrics["train"])
        for method in self.diversity_state.stage(Stage.REWARD):
            method.shape_rewards(step)
        if self._has_bonus_column:
            step.bonus[torch.isnan(step.task_reward)] = math.nan  # unscorable completions stay unscorable
            rewards_per_func[:, -1] = step.bonus.to(rewards_per_func.device, rewards_per_func.dtype)
        return rewards_per_func

    def _keeps_sampled_logps(self) -> bool:
        """Whether generation keeps the sampled tokens' log-probs (`CPUKernels.sampled_logps`) for a method."""
        return any(m.needs_sampled_logps(self.args) for m in active(self.args))

    def _generate(self, prompts: list):  # noqa: D102 (TRL hook)
        kernels = self.__dict__.get("cpu_kernels")  # absent on an object __init__ did not build
        sampled_logps = None if kernels is None else kernels.sampled_logps
        if sampled_logps is not None:
            sampled_logps.clear()
        result = super()._generate(prompts)
        scratch = self._scratch  # None when the population scores its members: nothing reads their sequences
        if self._keeps_sampled_logps() and self.model.training and scratch is not None:
            prompt_ids, completion_ids, tool_mask, _, sampling_logps, *_ = result
            if sampling_logps is None and tool_mask is None and sampled_logps is not None and len(sampled_logps) == 1:
                sampling_logps = _leading_logps(sampled_logps[0], completion_ids)
            scratch.generated = (prompt_ids, completion_ids, sampling_logps)
        if sampled_logps is not None:
            sampled_logps.clear()
        return result

    @torch.no_grad()
    def _sequence_logps(self) -> torch.Tensor:
        """Mean per-token log-prob of each sequence of the global batch under the sampling policy (the unlikeliness
        rank): the sampler's log-probs when it returned them (vLLM's, or `cpu_sample`'s in one plain sampling call),
        else one no-grad forward of this step's sequences."""
        scratch = self._scratch
        prompt_ids, completion_ids, sampling_logps = scratch.generated
        scratch.generated = None
        device = self.accelerator.device
        if sampling_logps is not None:
            local = torch.tensor([torch.tensor([math.nan if x is None else x for x in row]).nanmean().nan_to_num(0.0)
                                  if row else 0.0 for row in sampling_logps], device=device)
        else:
            batch = {k: v.to(device) for k, v in
                     pad_prompt_completion(prompt_ids, completion_ids, self._tokenizer.pad_token_id).items()}
            with activation_checkpointing_off(self.model, self.args.gradient_checkpointing_kwargs):
                logps = self._get_per_token_logps_and_entropies(
                    self.model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"].shape[1],
                    batch_size=self.args.per_device_train_batch_size)[0]
            local = masked_mean(logps, batch["completion_mask"], 1)
        return gather(local.float()).cpu()

    def _global_embeddings(self, kind: str, texts: list[str], columns: list[dict], completion_ids_list: list,
                           ) -> torch.Tensor:
        """(global batch, dim) embeddings of the completions, NaN rows where the task has none: 'ngram' (hashed
        character 3-grams), 'hidden' (pooled last hidden states) or 'task' (task.embed)."""
        if kind == "task":
            vectors = gather_object([self.hooks.embed(t, **c) for t, c in zip(texts, columns, strict=True)])
            lengths = {len(v) for v in vectors if v is not None}
            if len(lengths) > 1:
                raise ValueError(f"task.embed returned vectors of different lengths {sorted(lengths)} in one batch: "
                                 "novelty and semantic keys need one embedding dimension")
            dim = lengths.pop() if lengths else 1
            return torch.tensor([[math.nan] * dim if v is None else list(map(float, v)) for v in vectors])
        local = hashed_ngram_embedding(texts) if kind == "ngram" else self._pooled_hidden_states(completion_ids_list)
        return gather(local.to(self.accelerator.device)).cpu().float()

    @torch.no_grad()
    def _pooled_hidden_states(self, completion_ids_list: list) -> torch.Tensor:
        """L2-normalised mean of the policy's last hidden states over each completion's tokens."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        decoder = unwrapped.get_decoder()
        pad_id = self._tokenizer.pad_token_id
        pooled = []
        chunk = self.args.per_device_train_batch_size
        with activation_checkpointing_off(self.model, self.args.gradient_checkpointing_kwargs):
            for start in range(0, len(completion_ids_list), chunk):
                ids = completion_ids_list[start : start + chunk]
                batch = pad_prompt_completion([[] for _ in ids], ids, pad_id)
                mask = batch["attention_mask"].to(self.accelerator.device)
                hidden = decoder(input_ids=batch["input_ids"].to(mask.device), attention_mask=mask).last_hidden_state
                pooled.append(masked_mean(hidden, mask.unsqueeze(-1), 1))
        return torch.nn.functional.normalize(torch.cat(pooled).float(), dim=1)

    # ------------------------------------------------------------------------------- advantages
    def _generate_and_score_completions(self, inputs):  # noqa: D102 (TRL hook)
        population = self.population if self.model.training else None
        if population is not None:
            population.before_generation()  # the scheduled member generates its own batch
        with self._step_scratch() as scratch:
            output = super()._generate_and_score_completions(inputs)
            if population is not None:
                population.after_generation()
            methods = [m for m in self.diversity_state.stage(Stage.ADVANTAGE)
                       if self.model.training or not m.train_only]
            if methods:
                self._run_advantage_methods(methods, output, scratch.rewards_per_func, scratch.lengths)
            if any(m.reads_rewards for m in self.diversity_state.methods.values()):
                output["divrl_rewards"] = self._local_rows(self._summed_rewards(scratch.rewards_per_func),
                                                           output["advantages"])
                output["divrl_task_rewards"] = self._local_rows(scratch.task_rewards.nan_to_num(0.0),
                                                                output["advantages"])
        if self._needs_reference_logps() and "ref_per_token_logps" not in output:
            output["ref_per_token_logps"] = self._reference_logps(output)
        return output

    def _run_advantage_methods(self, methods: list[Method], output: dict[str, Any], rewards_per_func: torch.Tensor,
                               lengths: torch.Tensor | None) -> None:
        """Run the ADVANTAGE methods on the global batch (its reward columns after shaping, its completion lengths
        where a method needs them): a replacement's advantages (unscorable rows 0, as in TRL) and zeroed rows go to
        this process's slice and to the logged advantages."""
        group = self.num_generations if self.model.training else self.num_generations_eval
        summed = self._summed_rewards(rewards_per_func)
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        # Unscorable rows take their group's mean (no pull on the bin statistics) and get advantage 0, as in TRL.
        rewards = summed.masked_fill(unscorable, math.nan)
        group_mean = torch.nanmean(rewards.view(-1, group), dim=1).nan_to_num(0.0).repeat_interleave(group)
        step = AdvantageStep(summed=summed, filled=torch.where(unscorable, group_mean, rewards), unscorable=unscorable,
                             lengths=lengths, group=group, scale_rewards=self.args.scale_rewards)
        for method in methods:
            advantages = method.advantages(step)
            if advantages is not None:
                self._replace_advantages(output, advantages.masked_fill(unscorable.cpu(), 0.0))
            zeroed = method.zeroed_rows(step)
            if zeroed is not None:
                self._zero_advantages(output, zeroed)

    def _local_rows(self, values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """This process's slice of a global per-row tensor, on the device of `like` (this process's rows)."""
        start = self.accelerator.process_index * like.shape[0]
        return values[start : start + like.shape[0]].to(like.device)

    def _replace_advantages(self, output: dict[str, Any], advantages: torch.Tensor) -> None:
        """This process's slice of the global `advantages` replaces its advantages, in the logged ones too."""
        output["advantages"] = self._local_rows(advantages, output["advantages"])
        logged = self._logs["advantages"]  # TRL logged the advantages it computed; log ours instead
        for _ in range(min(len(advantages), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    def _zero_advantages(self, output: dict[str, Any], rows: torch.Tensor) -> None:
        """Set the advantages of the global `rows` (bool mask) to exactly 0: this process's slice and the logged
        ones."""
        output["advantages"] = output["advantages"].masked_fill(self._local_rows(rows, output["advantages"]), 0.0)
        logged = self._logs["advantages"]  # the global batch's advantages, appended last
        for offset in rows.nonzero().flatten().tolist():
            logged[len(logged) - len(rows) + offset] = 0.0

    def _reference_logps(self, output: dict[str, Any]) -> torch.Tensor:
        """Reference per-token log-probs of the generated completions (TRL's way: ref model or adapter off)."""
        return self._reference_batch_logps({
            "input_ids": torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1),
            "attention_mask": torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
            "completion_mask": output["completion_mask"], **{k: output[k] for k in _FORWARD_KEYS if k in output}})

    @torch.no_grad()
    def _reference_batch_logps(self, batch: dict[str, Any]) -> torch.Tensor:
        """Reference per-token log-probs of a batch's completions (input_ids, attention_mask, completion_mask and any
        multimodal inputs): the reference model's, or the policy's with its adapter off."""
        input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        logits_to_keep = batch["completion_mask"].size(1)
        batch_size = (self.args.per_device_train_batch_size if self.model.training
                      else self.args.per_device_eval_batch_size)
        forward_kwargs = {k: batch[k] for k in _FORWARD_KEYS if k in batch}
        with activation_checkpointing_off(self.model, self.args.gradient_checkpointing_kwargs):
            if self.ref_model is not None:
                return self._get_per_token_logps_and_entropies(
                    self.ref_model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **forward_kwargs
                )[0]
            unwrapped = self.accelerator.unwrap_model(self.model)
            with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                return self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **forward_kwargs
                )[0]

    # ------------------------------------------------------------------------------------- loss
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **multimodal_inputs):  # noqa: D102 (TRL hook)
        result = None
        kernels = self.__dict__.get("cpu_kernels")  # on the CPU: divrl's kernel, same outputs
        if kernels is not None and not compute_aux_loss and all(v is None for v in multimodal_inputs.values()):
            result = kernels.per_token_logps(model, input_ids, attention_mask, logits_to_keep, batch_size,
                                             compute_entropy, self._entropy_needs_grad(), self._model_patches)
        if result is None:
            result = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                                batch_size, compute_entropy, compute_aux_loss,
                                                                **multimodal_inputs)
        scratch = self._scratch
        if scratch is not None and scratch.capturing:
            if self.model.training:
                for method in self.diversity_state.stage(Stage.LOSS):
                    result = (method.edit_loss_logps(self.loss_context, scratch.loss_inputs, result[0]),
                              *result[1:])
            scratch.loss_forward = result
        return result

    def get_high_entropy_mask(self, entropies, mask, threshold):  # noqa: D102 (TRL hook)
        result = super().get_high_entropy_mask(entropies, mask, threshold)
        scratch = self._scratch
        if scratch is not None and scratch.capturing:
            scratch.entropy_mask = result  # the tokens TRL's loss and entropy bonus act on
        return result

    def _compute_loss(self, model, inputs):  # noqa: D102 (TRL hook)
        methods = self.diversity_state.stage(Stage.LOSS)
        context = self.loss_context
        for method in methods:
            method.before_loss(context)
        mode = "train" if self.model.training else "eval"
        with self._step_scratch() as scratch, self._methods_entropy_bonus(context.entropy_bonus):
            scratch.loss_inputs = inputs  # TRL's loss forward and entropy mask are captured in the scratch
            # an OBJECTIVE method replaces GRPO's surrogate: TRL's loss then runs on zeroed advantages
            loss = super()._compute_loss(model, inputs if self.objective is None
                                         else self.objective.surrogate_inputs(inputs, mode == "train"))
            per_token_logps, entropies, _ = scratch.loss_forward
            entropy_mask = scratch.entropy_mask
        # the methods' terms below run after it is dropped: their own forwards are not TRL's loss forward
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        step = LossStep(context=context, model=model, inputs=inputs, per_token_logps=per_token_logps,
                        entropies=entropies, mask=mask, entropy_mask=entropy_mask,
                        accumulation=self.current_gradient_accumulation_steps if mode == "train" else 1.0, mode=mode)
        if self.objective is not None:
            loss = loss + self.objective.objective_term(step)
        for method in methods:
            term = method.loss_term(step)
            if term is not None:
                loss = loss + term
        return loss

    @contextlib.contextmanager
    def _methods_entropy_bonus(self, bonus: EntropyBonus) -> Iterator[None]:
        """While TRL's loss runs: TRL's entropy bonus set from `bonus` when a LOSS method drives it (its
        coefficient, adaptive rule, target and last entropy), and what TRL's adaptive rule changed read back into
        `bonus` after; `args.entropy_target` gets its own value back (the config stays as the user built it).
        Without such a method, TRL's own settings run untouched."""
        if not self._drives_entropy_bonus:
            yield
            return
        configured_target = self.args.entropy_target
        self.entropy_coef, self.use_adaptive_entropy = bonus.coef, bonus.adaptive
        if bonus.adaptive:
            self.args.entropy_target, self._last_world_entropy = bonus.target, bonus.last_world_entropy
        try:
            yield
        finally:
            bonus.coef, bonus.last_world_entropy = float(self.entropy_coef), float(self._last_world_entropy)
            self.args.entropy_target = configured_target

    def _policy_logps(self, model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The policy's per-token log-probs of a batch of completions (input_ids, attention_mask,
        completion_mask) under `model`: the loss context's forward for LOSS methods' own batches."""
        return self._get_per_token_logps_and_entropies(model, batch["input_ids"], batch["attention_mask"],
                                                       batch["completion_mask"].shape[1])[0]

    # ------------------------------------------------------------------------------ checkpoints
    def method_state_dict(self) -> dict[str, Any]:
        """All method state a checkpoint holds; subclasses extend it (call super and add keys)."""
        return {"diversity": self.diversity_state.state_dict(), **method_states(self.shared_methods, shared=True)}

    def load_method_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `method_state_dict` returned; subclasses extend it (call super)."""
        self.diversity_state.load_state_dict(state["diversity"])
        load_method_states(self.shared_methods, shared=True, state=state)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Trainer's save, plus the gathered weights under FSDP with sharded state dicts (`divrl.trainers.fsdp`), then
        divrl's model card and the base model's portable name in every saved folder, checkpoints included."""
        super().save_model(output_dir, _internal_call)
        if saves_no_weights(self):
            save_gathered_weights(self, output_dir or self.args.output_dir)
        if self.args.should_save:
            write_model_card(self, output_dir or self.args.output_dir)

    def _save_checkpoint(self, model, trial):  # noqa: D102 (Trainer hook)
        self.checkpoints.save(trial, functools.partial(super()._save_checkpoint, model, trial))

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):  # noqa: D102
        resuming = resume_from_checkpoint not in (None, False)
        resume_from_checkpoint = self.checkpoints.resume_target(resume_from_checkpoint)
        if callable(getattr(self.task, "begin_run", None)):  # e.g. the molecule task's oracle-call journal
            self.task.begin_run(self.args.output_dir, resumed=resuming)
        self._patch_model()
        try:
            with upstream_deprecations_silenced():  # TRL's generation toggles gradient checkpointing by old names
                result = super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self._unpatch_model()
        self.checkpoints.wait()  # the last checkpoint's manifest is on disk when training returns
        return result

    def _load_optimizer_and_scheduler(self, checkpoint):  # noqa: D102 (Trainer hook, runs on resume)
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.checkpoints.restore(checkpoint)


def quantized_base(model: Any, model_init_kwargs: dict | None, quantization_config: Any) -> str | None:
    """'4-bit' / '8-bit' when the base model is (or will load) bitsandbytes-quantised, else None: a model object's
    flags (set by transformers' quantizer), or for a path the quantization_config GRPOTrainer will load it with."""
    if not isinstance(model, str):
        for bits in (4, 8):
            if getattr(model, f"is_loaded_in_{bits}bit", False):
                return f"{bits}-bit"
        return None
    config = quantization_config or (model_init_kwargs or {}).get("quantization_config")
    for bits in (4, 8):
        flag = f"load_in_{bits}bit"
        if (config.get(flag) if isinstance(config, dict) else getattr(config, flag, False)):
            return f"{bits}-bit"
    return None


def _refuse_population_vllm_on_quantized_base(model: Any, args: DivRLConfig, quantization_config: Any) -> None:
    """TRL syncs LoRA weights to vLLM by merging the adapter into the base and unmerging it; on a bitsandbytes
    base that dequantises and requantises the shared base weights at every sync, and a population syncs at every
    member switch (and for every member at each selection), so rounding error accumulates in the base."""
    if not (args.population and args.use_vllm):
        return
    bits = quantized_base(model, args.model_init_kwargs, quantization_config)
    if bits is not None:
        raise ValueError(
            f"DivRLConfig.population with use_vllm=True on a {bits} (bitsandbytes) base model is refused: TRL's weight "
            "sync merges each member's LoRA into the shared base and unmerges it, which requantises the base at every "
            "member switch. Use use_vllm=False (transformers generation) or an unquantised base (quantize: none)")


def _divrl_config_from(args: GRPOConfig) -> DivRLConfig:
    """A DivRLConfig holding `args`' values as they are (TRL's derived values kept, __post_init__ not rerun) and
    every divrl field at its default; `args` itself is left untouched."""
    converted = copy.copy(args)
    converted.__class__ = DivRLConfig
    for spec in fields(DivRLConfig):
        if spec.name not in args.__dataclass_fields__:
            factory = spec.default_factory
            setattr(converted, spec.name, spec.default if factory is MISSING else factory())
    return converted


def _leading_logps(sampled: torch.Tensor, completion_ids: list[list[int]]) -> list[list[float]] | None:
    """Each completion's sampled-token log-probs (the first len(completion) entries of its sampler row: TRL cuts
    completions after EOS and stop strings, never before their start), or None when the rows do not match."""
    if sampled.shape[0] != len(completion_ids) or any(len(ids) > sampled.shape[1] for ids in completion_ids):
        return None
    return [row[: len(ids)].tolist() for row, ids in zip(sampled, completion_ids, strict=True)]
