"""Population-GRPO (the execution-rewards paper, Sec. 4.3) on one base model: K LoRA adapters are the K members.

Members train in turn, each on its own batches and its own completions: the member scheduled for a
generation cycle (`steps_per_generation * num_iterations` micro-steps) is made active before it generates.
Every member trains `population_interval` (T) optimizer steps between two selections; then each member
samples completions for the held prompts, gets the score S_k = d_k (1 + max reward), the top M are souped
exactly in delta-W space (`divrl.core.lora_soup_delta`), projected back to the adapters' rank
(`divrl.core.project_to_rank`, truncation error logged as `population/soup_error`), and all K restart from
the soup plus noise relative to it (`divrl.core.perturb_relative_`): Gaussian noise on each member's LoRA
factors, scaled so that every layer's dW moves by exactly population_sigma x the soup's ||dW||_F.

Design decisions:
- The optimizer holds every member's LoRA parameters (PEFT's `set_adapter` would leave only the active
  one trainable when the optimizer is built: the "optimizer trap" of notes/lora-soups.md). Inactive
  members get no gradient (None), so AdamW leaves them and their moments untouched: the Adam state is
  per parameter, hence per member.
- After a soup the optimizer state of every member is reset: the soup's factors live in new coordinates
  (an SVD of the souped delta), so the old moments no longer describe them.
- Restart noise is relative, not the execution-rewards paper's absolute sigma_p = 0.01 per weight: LoRA factors
straight out of
  the rank projection have entries ~1e-3, so an absolute 0.01 replaced the soup by a random dW tens of times
  its size. Relative noise keeps each member at distance population_sigma ||dW_soup|| from the soup.
- The initial population is K copies of the initial adapter ("default") plus the same relative noise: a
  fresh adapter (B = 0) has dW = 0 and stays unperturbed, so members start equal and diverge through
  their own batches and samples; an adapter passed in already trained is perturbed around its dW.
- Scores use the task reward only (TRL's reward columns, before any IPS/QD/novelty shaping, and without
  touching archives or memories); scoring then restores the task's state (reward cache, oracle-call counters,
  diversity-filter memory) and the metrics after each member, so every member is scored from the same state
  and a selection does not change what training sees next. d_k is the mean pairwise cosine distance of
  hashed character n-gram embeddings of a prompt's completions, averaged over the held prompts.
- Each member keeps its own `DiversityState` (archive, novelty memory, entropy coefficient), swapped in
  with the member; after a soup they are kept (they describe what was explored, not the weights).
- Rank slots the soup leaves empty (a soup of rank < r, or population_soup_rank < r) are zero in both
  factors after the projection; the restart noise gives them small non-zero factors (sigma > 0), so they
  can learn again.
- Under DDP the members not being trained are unused parameters: `ddp_find_unused_parameters` defaults
  to True (False is refused).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback

from divrl.core.metrics import mean_pairwise_cosine_distance
from divrl.core.novelty import hashed_ngram_embedding
from divrl.core.population import (
    lora_soup_delta,
    perturb_relative_,
    project_to_rank,
    select_top,
    selection_scores,
)
from divrl.methods.population import PopulationConfig  # noqa: F401 (re-exported)
from divrl.task import completion_text

logger = logging.getLogger(__name__)

FIRST_MEMBER = "default"  # PEFT's adapter name: member 0 is saved at the top level of a checkpoint
MEMBER_PREFIX = "member_"




# ------------------------------------------------------------------------------ adapters as members
def member_names(size: int) -> list[str]:
    """Adapter names of a population of `size`: PEFT's "default" adapter is member 0."""
    return [FIRST_MEMBER] + [f"{MEMBER_PREFIX}{k}" for k in range(1, size)]


def check_population_adapter(model: Any, adapter: str = FIRST_MEMBER) -> None:
    """Refuse adapters whose soup is not a soup of s * B @ A deltas (DoRA, LoRA biases, full-module copies)."""
    from peft import LoraConfig, PeftModel

    if not isinstance(model, PeftModel) or adapter not in model.peft_config:
        raise ValueError("DivRLConfig.population needs LoRA members on one base model: pass "
                         "peft_config=peft.LoraConfig(...) (or a PeftModel with a LoRA adapter 'default')")
    config = model.peft_config[adapter]
    if not isinstance(config, LoraConfig):
        raise ValueError(f"DivRLConfig.population needs a LoRA adapter, got {type(config).__name__}")
    unsupported = {
        "use_dora": "DoRA's magnitude normalisation makes a soup of deltas inexact",
        "lora_bias": "LoRA biases are not part of s * B @ A",
        "modules_to_save": "full module copies per member would cost K copies of those modules",
        "trainable_token_indices": "trainable token embeddings are not part of s * B @ A",
        "target_parameters": "LoRA on raw parameters is not supported by the soup",
    }
    for option, reason in unsupported.items():
        if getattr(config, option, None):
            raise ValueError(f"DivRLConfig.population: LoraConfig.{option} is not supported ({reason}); "
                             "population members must be plain (or rsLoRA) LoRA adapters on linear layers")
    lora_layers(model, adapter)  # raises on embedding / convolution LoRA


def lora_layers(model: torch.nn.Module, adapter: str) -> list[tuple[str, Any]]:
    """The (module name, LoRA layer) pairs holding `adapter` as linear factors lora_A / lora_B."""
    from peft.tuners.lora import LoraLayer

    layers = []
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or adapter not in module.r:
            continue
        if adapter not in module.lora_A or module.lora_A[adapter].weight.dim() != 2:
            raise ValueError(f"DivRLConfig.population: LoRA on {name} ({type(module).__name__}) is not a linear "
                             "layer; soups support LoRA on linear layers only (set LoraConfig.target_modules)")
        layers.append((name, module))
    if not layers:
        raise ValueError(f"DivRLConfig.population: adapter {adapter!r} has no LoRA layers")
    return layers


def adapter_parameters(model: torch.nn.Module, adapter: str) -> list[torch.nn.Parameter]:
    """The LoRA factors (A, B per layer) of one adapter, in module order."""
    return [p for _, layer in lora_layers(model, adapter)
            for p in (layer.lora_A[adapter].weight, layer.lora_B[adapter].weight)]


@torch.no_grad()
def copy_adapter(model: torch.nn.Module, source: str, target: str) -> None:
    """Set adapter `target`'s factors to `source`'s (same configuration)."""
    for src, dst in zip(adapter_parameters(model, source), adapter_parameters(model, target), strict=True):
        dst.copy_(src)


def soup_deltas(model: torch.nn.Module, sources: Sequence[str], weights: Sequence[float] | None = None
                ) -> Iterator[tuple[str, Any, torch.Tensor]]:
    """(module name, layer, exact soup sum_i w_i s_i B_i A_i) per LoRA layer, one module at a time."""
    for name, layer in lora_layers(model, sources[0]):
        factors = [(layer.lora_A[s].weight, layer.lora_B[s].weight, layer.scaling[s]) for s in sources]
        yield name, layer, lora_soup_delta(factors, weights)


@torch.no_grad()
def soup_adapters(model: torch.nn.Module, sources: Sequence[str], targets: Sequence[str],
                  weights: Sequence[float] | None = None, rank: int | None = None) -> float:
    """Set every target adapter to the best rank-`rank` approximation of the exact soup of `sources`.

    `rank` None = each layer's LoRA rank; smaller ranks leave the remaining factor rows/columns zero.
    Returns the relative Frobenius truncation error over all layers,
    sqrt(sum_layers ||dW - dW_r||^2 / sum_layers ||dW||^2) (0 when nothing was truncated).
    """
    squared_error = squared_norm = 0.0
    for name, layer, delta in soup_deltas(model, sources, weights):
        lora_rank = layer.r[targets[0]]
        kept = lora_rank if rank is None else rank
        if kept > lora_rank:
            raise ValueError(f"DivRLConfig.population_soup_rank ({kept}) exceeds the LoRA rank {lora_rank} of {name}")
        lora_a, lora_b, error = _on_rank_zero(project_to_rank, delta, kept, layer.scaling[targets[0]])
        for target in targets:
            a, b = layer.lora_A[target].weight, layer.lora_B[target].weight
            a.zero_()
            b.zero_()
            a[:kept].copy_(lora_a)
            b[:, :kept].copy_(lora_b)
        norm = float(delta.square().sum())
        squared_norm += norm
        squared_error += error**2 * norm
    return math.sqrt(squared_error / squared_norm) if squared_norm > 0 else 0.0


def _on_rank_zero(function: Any, *args: Any) -> Any:
    """`function(*args)` (a tuple) computed on rank 0 only and broadcast to every process under torch.distributed:
    an SVD's singular vectors are defined up to sign, and processes computing their own could disagree."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return function(*args)
    result = [None]
    if dist.get_rank() == 0:  # CPU tensors: an unpickled CUDA tensor would land on rank 0's device index
        result = [tuple(x.cpu() if isinstance(x, torch.Tensor) else x for x in function(*args))]
    dist.broadcast_object_list(result, src=0)
    return result[0]


# ---------------------------------------------------------------------------------- trainer side
@dataclass
class PopulationState:
    """Where the population stands: saved with every checkpoint (plain python, weights_only-safe)."""

    size: int
    active: int = 0
    soups: int = 0
    member_steps: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    selected: list[int] = field(default_factory=list)
    soup_error: float | None = None

    def __post_init__(self) -> None:
        self.member_steps = self.member_steps or [0] * self.size


class _PopulationStepCallback(TrainerCallback):
    """Runs the population's bookkeeping after every optimizer step."""

    def __init__(self, population: Population) -> None:
        self.population = population

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
        self.population.step_end()


class Population:
    """Population-GRPO's controller for one `DivRLTrainer` (`trainer.population`; see the module docstring).

    The trainer calls `enable_member_gradients` before building its optimizer and `before_generation` /
    `after_generation` around each training generation; a callback calls `step_end` after each optimizer step.
    Each member keeps its own `DiversityState`, swapped into `trainer.diversity_state` with the member.
    """

    def __init__(self, trainer: Any) -> None:
        """Check the configuration against the model, add the K-1 extra adapters, pick the held prompts."""
        self.trainer = trainer
        args = trainer.args
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
            raise ValueError("DivRLConfig.population is not supported under DeepSpeed or FSDP: souping and switching "
                             "members write the LoRA weights and optimizer states in place, which sharded engines "
                             "partition and keep their own copies of (use DDP, one policy per GPU memory)")
        model = trainer.model
        check_population_adapter(model)
        if args.population_soup_rank is not None:
            smallest = min(layer.r[FIRST_MEMBER] for _, layer in lora_layers(model, FIRST_MEMBER))
            if args.population_soup_rank > smallest:
                raise ValueError(f"DivRLConfig.population_soup_rank ({args.population_soup_rank}) exceeds the "
                                 f"smallest LoRA rank of the adapter ({smallest})")
        generate_every = args.steps_per_generation * trainer.num_iterations
        if generate_every % args.gradient_accumulation_steps:
            raise ValueError(
                "DivRLConfig.steps_per_generation x num_iterations "
                f"({args.steps_per_generation} x {trainer.num_iterations}) must be a multiple of "
                f"gradient_accumulation_steps ({args.gradient_accumulation_steps}) with population=True, so that "
                "one member's completions are never mixed with another's in one optimizer step")
        self.steps_per_turn = generate_every // args.gradient_accumulation_steps
        if args.population_interval % self.steps_per_turn:
            raise ValueError(f"DivRLConfig.population_interval ({args.population_interval}) must be a multiple of the "
                             f"optimizer steps per generation ({self.steps_per_turn}) so every member trains "
                             "equally between selections")
        processes = trainer.accelerator.num_processes
        if args.population_held_prompts % processes:
            raise ValueError(f"DivRLConfig.population_held_prompts ({args.population_held_prompts}) must be a "
                             f"multiple of the number of processes ({processes})")
        self.held_rows = self._take_held_prompts(args.population_held_prompts)
        # Members not trained at a step have no gradient: under DDP they are unused parameters. DivRLTrainer sets
        # ddp_find_unused_parameters=True before Trainer.__init__ builds DDP's kwargs (a write here came too late).
        if args.ddp_find_unused_parameters is False and processes > 1:
            raise ValueError("DivRLConfig.ddp_find_unused_parameters must not be False with population=True: the "
                             "members not trained at a step are unused parameters for DDP (leave it unset)")

        self.member_names = member_names(args.population_size)
        first = model.peft_config[FIRST_MEMBER]
        for name in self.member_names[1:]:
            model.add_adapter(name, copy.deepcopy(first))  # PEFT keeps the object: one per adapter
        for name in self.member_names[1:]:
            copy_adapter(model, FIRST_MEMBER, name)
        self._member_parameters = [p for name in self.member_names for p in adapter_parameters(model, name)]
        self.state = PopulationState(size=args.population_size)
        self._member_diversity: list[Any] | None = None
        self.scored_completions = 0  # reward calls of the latest scoring (global), logged on their own
        self._perturb_members()
        self.activate_member(0)
        trainer.add_callback(_PopulationStepCallback(self))

    def _take_held_prompts(self, count: int) -> list[dict[str, Any]]:
        """The rows scored at selections: the first `count` of eval_dataset, else held out from train_dataset."""
        from datasets import Dataset

        trainer = self.trainer
        source = trainer.eval_dataset if isinstance(trainer.eval_dataset, Dataset) else None
        if source is None:
            if not isinstance(trainer.train_dataset, Dataset) or len(trainer.train_dataset) <= count:
                raise ValueError(
                    f"DivRLConfig.population_held_prompts ({count}) needs an eval_dataset with that many rows, or a "
                    "map-style train_dataset with more rows to hold them out from")
            kept = len(trainer.train_dataset) - count
            rows = trainer.train_dataset.select(range(kept, len(trainer.train_dataset)))
            trainer.train_dataset = trainer.train_dataset.select(range(kept))
            logger.info("Population-GRPO: holding out the last %d training prompts for member scoring", count)
        else:
            if len(source) < count:
                raise ValueError(f"DivRLConfig.population_held_prompts ({count}) exceeds the eval_dataset size "
                                 f"({len(source)})")
            rows = source.select(range(count))
        return [dict(row) for row in rows]

    # ------------------------------------------------------------------------------- members
    def member_diversity_states(self) -> list[Any]:
        """Each member's DiversityState (the active one is `trainer.diversity_state`); created on first use."""
        if self._member_diversity is None:
            self._member_diversity = [self.trainer.diversity_state] + [
                self.trainer.new_diversity_state() for _ in range(self.state.size - 1)
            ]
        return self._member_diversity

    def member_parameters(self) -> list[torch.nn.Parameter]:
        """Every member's LoRA factors (all of them are in the optimizer); soups write into them in place."""
        return self._member_parameters

    def enable_member_gradients(self) -> None:
        """Make every member trainable again (PEFT's set_adapter freezes the inactive adapters)."""
        for param in self._member_parameters:
            param.requires_grad_(True)

    def activate_member(self, index: int) -> None:
        """Route forward passes through member `index`, keep all members trainable, swap in its method state."""
        trainer = self.trainer
        trainer.model.set_adapter(self.member_names[index])
        self.enable_member_gradients()
        self.state.active = index
        trainer.diversity_state = self.member_diversity_states()[index]
        if trainer.use_vllm:
            trainer._last_loaded_step = -1  # the generation engine must receive this member's weights

    def scheduled_member(self) -> int:
        """The member whose turn it is at the current optimizer step (round-robin by generation cycle)."""
        return (self.trainer.state.global_step // self.steps_per_turn) % self.state.size

    def _perturb_members(self) -> None:
        """Move every member's dW, layer by layer, by population_sigma x the layer's ||dW|| (noise on its factors;
        a zero dW stays); the noise depends only on (seed, selection count)."""
        args = self.trainer.args
        generator = torch.Generator().manual_seed(args.seed * 1_000_003 + self.state.soups)
        blocks = [(layer.lora_A[name].weight, layer.lora_B[name].weight, layer.scaling[name])
                  for name in self.member_names for _, layer in lora_layers(self.trainer.model, name)]
        perturb_relative_(blocks, args.population_sigma, generator)

    # ------------------------------------------------------------------------------ the step
    def before_generation(self) -> None:
        """Make the scheduled member active before it generates its batch."""
        member = self.scheduled_member()
        if member != self.state.active:
            self.activate_member(member)

    def after_generation(self) -> None:
        """Log the active member's mean reward as `population/reward_k`."""
        metrics = self.trainer._metrics["train"]
        metrics[f"population/reward_{self.state.active}"].append(metrics["reward"][-1])

    def step_end(self) -> None:
        """Count the active member's step; run a selection every K * T steps."""
        self.state.member_steps[self.state.active] += 1
        if self.trainer.state.global_step % (self.state.size * self.trainer.args.population_interval) == 0:
            self.run_selection()

    # ------------------------------------------------------------------------------- selection
    @torch.no_grad()
    def score_members(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Diversity d_k and max task reward of each member's completions on the held prompts (all processes).

        Each process samples its share of the held prompts, at most one training generation batch at a time
        (so scoring needs no more memory than a training step); results are gathered, so every process
        computes the same scores.
        """
        trainer = self.trainer
        accelerator = trainer.accelerator
        local_rows = self.held_rows[accelerator.process_index :: accelerator.num_processes]
        per_call = max(1, trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
                       // trainer.num_generations)
        chunks = [local_rows[start : start + per_call] for start in range(0, len(local_rows), per_call)]
        diversity, max_reward = [], []
        for index in range(self.state.size):
            # Every member is scored from the same task state (a diversity filter must not penalise member 1 for
            # what member 0 wrote), and scoring leaves that state as it found it.
            with self._scoring_leaves_no_trace():
                self.activate_member(index)
                distances, best = [], -math.inf
                for rows in chunks:
                    chunk_distances, chunk_best = self._sample_and_score(rows)
                    distances += chunk_distances
                    best = max(best, chunk_best)
                diversity.append(sum(distances) / len(distances))
                max_reward.append(best)
        self.scored_completions = self.state.size * len(self.held_rows) * trainer.num_generations
        return torch.tensor(diversity), torch.tensor(max_reward)

    @contextlib.contextmanager
    def _scoring_leaves_no_trace(self) -> Iterator[None]:
        """Scoring samples are not training samples: restore afterwards what scoring them changes.

        The task's state (`task.state_dict()`: e.g. the molecule reward cache, its oracle-call counters and the
        diversity filter's memory), the logged metrics, the metrics and completion-table columns reward
        functions queued through TRL's `log_metric` / `log_extra` (flushed at the next training step), and the
        input-token count. The reward calls spent on scoring are reported on their own, as
        `population/scoring_completions` at each selection.
        """
        trainer = self.trainer
        task = getattr(trainer, "task", None)
        keeps_state = task is not None and hasattr(task, "state_dict") and hasattr(task, "load_state_dict")
        task_state = copy.deepcopy(task.state_dict()) if keeps_state else None
        saved_metrics = {mode: {k: list(v) for k, v in m.items()} for mode, m in trainer._metrics.items()}
        pending = {name: {k: list(v) for k, v in getattr(trainer, name).items()}
                   for name in ("_pending_metrics", "_pending_extra_logs") if hasattr(trainer, name)}
        saved_tokens = trainer.state.num_input_tokens_seen
        try:
            yield
        finally:
            for mode, metrics in saved_metrics.items():
                trainer._metrics[mode].clear()
                trainer._metrics[mode].update(metrics)
            for name, values in pending.items():
                getattr(trainer, name).clear()
                getattr(trainer, name).update(values)
            trainer.state.num_input_tokens_seen = saved_tokens
            if keeps_state:
                task.load_state_dict(task_state)

    def _sample_and_score(self, rows: list[dict[str, Any]]) -> tuple[list[float], float]:
        """Sample a group per row with the active member; per-prompt mean pairwise distances (gathered from
        every process) and the max task reward."""
        from accelerate.utils import gather_object

        trainer = self.trainer
        group = trainer.num_generations
        inputs = [row for row in rows for _ in range(group)]
        prompts = [row["prompt"] for row in inputs]
        _, completion_ids, _, completions, *_ = trainer._generate(prompts)
        rewards = trainer.task_rewards(inputs, prompts, completions, completion_ids)
        total = trainer._summed_rewards(rewards).masked_fill(torch.isnan(rewards).all(dim=1), -math.inf)
        embeddings = hashed_ngram_embedding(gather_object([completion_text(c) for c in completions]))
        distances = [mean_pairwise_cosine_distance(embeddings[s : s + group]) for s in range(0, len(embeddings), group)]
        return distances, float(total.max())

    def run_selection(self) -> None:
        """Score every member on the held prompts, then restart the population from the soup of the best."""
        self.restart_from_soup(*self.score_members())
        self.trainer._metrics["train"]["population/scoring_completions"].append(float(self.scored_completions))

    def restart_from_soup(self, diversity: torch.Tensor, max_reward: torch.Tensor) -> None:
        """Soup the top M by S_k exactly, project to rank r, restart all members from it plus noise."""
        trainer, state = self.trainer, self.state
        scores = torch.nan_to_num(selection_scores(diversity, max_reward), nan=-math.inf)
        selected = select_top(scores, trainer.args.population_top_m)
        error = soup_adapters(trainer.model, [self.member_names[k] for k in selected], self.member_names,
                              rank=trainer.args.population_soup_rank)
        state.soups += 1
        self._perturb_members()
        if trainer.optimizer is not None:
            for param in self.member_parameters():
                trainer.optimizer.state.pop(param, None)
        state.scores = scores.tolist()
        state.selected = selected
        state.soup_error = error
        self.activate_member(self.scheduled_member())
        metrics = trainer._metrics["train"]
        for k in range(state.size):
            metrics[f"population/score_{k}"].append(state.scores[k])
            metrics[f"population/diversity_{k}"].append(float(diversity[k]))
            metrics[f"population/max_reward_{k}"].append(float(max_reward[k]))
            metrics[f"population/selected_{k}"].append(float(k in selected))
        metrics["population/soup_error"].append(error)
        metrics["population/soups"].append(float(state.soups))

    # ----------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Population bookkeeping plus each member's method state (member weights and Adam state are in the
        checkpoint's adapters and optimizer.pt)."""
        return {"population": asdict(self.state),
                "member_diversity": [s.state_dict() for s in self.member_diversity_states()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (the population size must match)."""
        saved = PopulationState(**state["population"])
        if saved.size != self.state.size:
            raise ValueError(f"resume_from_checkpoint: the checkpoint's population has {saved.size} members but "
                             f"DivRLConfig.population_size is {self.state.size}")
        self.state = saved
        if state["member_diversity"] is not None:
            for member_state, saved_state in zip(self.member_diversity_states(), state["member_diversity"],
                                                 strict=True):
                member_state.load_state_dict(saved_state)
        self.activate_member(saved.active)
