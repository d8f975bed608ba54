"""Experience replay with augmented memory (REINVENT's inception, Blaschke et al. 2020; Saturn's augmented memory,
Guo & Schwaller 2024): a bounded memory of the best distinct outcomes seen so far (`divrl.core.ReplayMemory`), a few
of which are replayed into every training micro-batch's loss.

- What enters: each micro-batch's completions with a task outcome (`task.outcome_key`: a canonical SMILES) and a task
  score above 0, gathered from every process, ranked by the task score through the task's own filter (the scaffold
  filter's score) and before any method's shaping (IPS, bonuses). The memory keeps the `replay_memory_size` best.
  Replaying costs no oracle call: a replayed molecule's score is the one stored when it was scored.
- What is replayed: `replay_samples` entries drawn per micro-batch (the same draw on every process), each written
  anew by the task's `augment` hook when it has one (the molecule task rewrites a chemical LM's SMILES with its atoms
  renumbered: Saturn replays randomised SMILES so the model learns the molecule, not one spelling; a spelling the
  tokenizer cannot write falls back to the stored one).
- The replayed rows' loss, for the objective in use:
  - with `reinvent`: REINVENT's own, (log pi_prior(x) + sigma S(x) - log pi(x))^2 with the stored S, exactly as
    REINVENT scores its inception samples;
  - with GRPO's surrogate: a replayed row has no group of its own, so its advantage is self-imitation learning's
    (Oh et al. 2018): max(S - mean, 0) / (std + 1e-4), with the mean and std of the current micro-batch's task
    scores (the same statistics GRPO normalises with, unshaped as the stored S is). Only a memory entry better than
    what the policy writes now is pulled up, by how much better; the loss is -A x the row's mean token log-prob. A
    replayed row's sampling policy is long gone, so no importance ratio is formed (REINVENT forms none either).
  Both add sum(replayed losses) / (B + k) to the micro-batch's loss (B its rows, k the replayed ones), REINVENT's
  weighting of inception samples in its batch mean.
The memory and its draw counter are saved with checkpoints and restored on resume.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core.reinvent import augmented_likelihood_residual
from divrl.core.replay import ReplayMemory
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import Card, LossStep, Method, Stage, register
from divrl.methods.hooks import refuse
from divrl.task import has_hook


@dataclass
class ReplayConfig:
    """The experience-replay fields of `DivRLConfig`."""

    replay: bool = field(default=Unset(False), metadata=_help(
        "Experience replay with augmented memory (REINVENT's inception, Saturn's augmented memory): the best "
        "outcomes so far are replayed into every micro-batch's loss. Default False."))
    replay_memory_size: int = field(default=100, metadata=_help(
        "Distinct outcomes the memory keeps, the best by task score (Saturn: 100). Default 100."))
    replay_samples: int = field(default=10, metadata=_help(
        "Memory entries replayed per micro-batch (REINVENT's inception sample size: 10). Default 10."))
    replay_augment: bool = field(default=True, metadata=_help(
        "Rewrite each replayed completion with the task's `augment` hook (randomised SMILES for molecules), when "
        "the task has one. Default True."))


@register
class Replay(Method):
    """LOSS: replays the memory's best outcomes into each training micro-batch's loss."""

    name = "replay"
    switch = "replay"
    stage = Stage.LOSS
    order = 50
    Config = ReplayConfig
    card = Card("Experience replay (augmented memory)", "experience-replay", papers.AUGMENTED_MEMORY)
    preset = {"replay": True}
    state_key = "replay"
    reads_rewards = True
    runs_on_toy = False  # it replays completion texts, which the toy environments do not have

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.memory = ReplayMemory(args.replay_memory_size)
        self.draws = 0

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.replay)

    @classmethod
    def validate(cls, args: Any) -> None:
        check(args.replay_memory_size >= 1, "replay_memory_size", f"must be >= 1, got {args.replay_memory_size}")
        check(args.replay_samples >= 1, "replay_samples", f"must be >= 1, got {args.replay_samples}")
        if args.replay and args.flowrl:
            check(False, "replay", "cannot be combined with flowrl: a replayed row has no log Z residual of its own")

    @classmethod
    def resolve_hooks(cls, args: Any, task: Any) -> dict[str, Any]:
        """The task's own outcome key (the trainer's `task_outcome_key`) names memory entries; `augment` is optional."""
        if not has_hook(task, "outcome_key"):
            refuse("replay", "needs a task with an `outcome_key(completion, **row)` hook: the memory keeps distinct "
                             "outcomes")
        return {"augment": task.augment} if args.replay_augment and has_hook(task, "augment") else {}

    @classmethod
    def needs_reference_logps(cls, args: Any) -> bool:
        return bool(args.reinvent)

    def state_dict(self) -> Any:
        return {"memory": self.memory.state_dict(), "draws": self.draws}

    def load_state_dict(self, state: Any) -> None:
        self.memory.load_state_dict(state["memory"])
        self.draws = int(state["draws"])

    def loss_term(self, step: LossStep) -> torch.Tensor | None:
        if step.mode != "train":
            return None
        context = step.context
        if context.tokenizer is None or context.reference_logps is None:
            raise ValueError("DivRLConfig.replay needs the trainer's tokenizer and reference model: it runs in "
                             "DivRLTrainer only")
        self._remember(step)
        rng = random.Random(f"{self.args.seed}-replay-{self.draws}")
        self.draws += 1
        drawn = self.memory.sample(self.args.replay_samples, rng)
        if not drawn:
            return None
        batch, scores = self._batch(drawn, rng, context.tokenizer)
        batch = {name: tensor.to(step.mask.device) for name, tensor in batch.items()}
        mask = batch["completion_mask"].to(step.per_token_logps.dtype)
        logps = context.policy_logps(step.model, batch)
        scores = scores.to(logps.device, logps.dtype)
        if self.args.reinvent:
            prior = context.reference_logps(batch)
            losses = augmented_likelihood_residual((logps * mask).sum(1), (prior * mask).sum(1), scores,
                                                   self.args.reinvent_sigma).pow(2)
        else:
            current = step.inputs["divrl_task_rewards"].to(logps.dtype)
            advantages = (scores - current.mean()).clamp(min=0.0) / (current.std(unbiased=False) + 1e-4)
            losses = -advantages * (logps * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        rows = step.inputs["completion_ids"].shape[0]
        context.log_means(step.mode, {"replay/loss": losses.sum(), "replay/score": scores.sum()},
                          torch.tensor(float(len(drawn)), device=logps.device))
        context.metrics[step.mode]["replay/memory_size"].append(float(len(self.memory)))
        return losses.sum() / (rows + len(drawn)) / step.accumulation

    def _remember(self, step: LossStep) -> None:
        """Offer this micro-batch's valid, scored completions of every process to the memory."""
        inputs, tokenizer = step.inputs, step.context.tokenizer
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(inputs["prompt_ids"], inputs["prompt_mask"],
                                                                   strict=True)]
        completions = tokenizer.batch_decode([ids[mask.bool()] for ids, mask in
                                              zip(inputs["completion_ids"], inputs["completion_mask"], strict=True)],
                                             skip_special_tokens=True)
        prompt_texts = tokenizer.batch_decode(prompts, skip_special_tokens=True)
        scores = inputs["divrl_task_rewards"].tolist()
        local = []
        for prompt_ids, prompt, completion, score in zip(prompts, prompt_texts, completions, scores, strict=True):
            key = self.hooks.task_outcome_key(completion, prompt=prompt) if score > 0 else None
            if key is not None:
                local.append((key, [prompt_ids, prompt, completion], score))
        from accelerate.utils import gather_object

        for key, item, score in gather_object(local):
            self.memory.add(key, item, score)

    def _batch(self, drawn: list, rng: random.Random, tokenizer: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The replayed rows, padded as TRL pads (prompt left, completion right, EOS ending each completion), and
        their stored scores."""
        from divrl.methods.rehearsal import pad_prompt_completion

        prompt_ids, completion_ids = [], []
        for _, (prompt, prompt_text, completion), _ in drawn:
            ids = None
            if self.hooks.augment is not None:
                rewritten = tokenizer(self.hooks.augment(completion, rng, prompt=prompt_text),
                                      add_special_tokens=False)["input_ids"]
                ids = None if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in rewritten else rewritten
            if ids is None:
                ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
            prompt_ids.append(prompt)
            completion_ids.append([*ids, tokenizer.eos_token_id])
        batch = pad_prompt_completion(prompt_ids, completion_ids, tokenizer.pad_token_id)
        return batch, torch.tensor([score for _, _, score in drawn])
