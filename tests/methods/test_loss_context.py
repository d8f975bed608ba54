"""LOSS and OBJECTIVE methods see the trainer only through `LossContext` (issue 46): no method file reaches into
trainer internals, MaxEnt drives TRL's entropy bonus through `EntropyBonus`, and the trainer hands that bonus to
TRL's loss and gives the config its own entropy target back."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from divrl.methods import EntropyBonus, LossContext, LossStep, Method, Stage, method_args
from divrl.methods.maxent_entropy import MaxEntEntropy
from divrl.trainers.divrl_trainer import DivRLTrainer

METHODS_DIR = Path(__file__).resolve().parents[2] / "src" / "divrl" / "methods"


def _trainer_uses(tree: ast.AST) -> list[int]:
    """Lines naming a trainer (`trainer`, `x.trainer`) outside `configure_trainer`, the one-time wiring hook."""
    lines: list[int] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "configure_trainer":
            continue
        if (isinstance(node, ast.Name) and node.id == "trainer") or (
                isinstance(node, ast.Attribute) and node.attr == "trainer"):
            lines.append(node.lineno)
        lines += _trainer_uses(node)
    return lines


def test_no_method_reaches_the_trainer_outside_its_one_time_wiring() -> None:
    offenders = {path.name: lines for path in sorted(METHODS_DIR.glob("*.py"))
                 if (lines := _trainer_uses(ast.parse(path.read_text())))}
    assert offenders == {}
    assert "trainer" not in LossStep.__dataclass_fields__
    for hook in ("surrogate_inputs", "objective_term"):  # the OBJECTIVE protocol is declared on the base class
        assert hook in vars(Method)


def _context(sync_gradients: bool = True) -> LossContext:
    accelerator = SimpleNamespace(sync_gradients=sync_gradients,
                                  reduce=lambda tensor, reduction: tensor)  # one process
    return LossContext(accelerator=accelerator, metrics={"train": __import__("collections").defaultdict(list)},
                       policy_logps=lambda model, batch: torch.zeros(1), causal_lm=lambda model: model,
                       pad_token_id=0, epsilon_low=0.2, epsilon_high=0.2, loss_type="dapo")


def _step(context: LossContext, entropy: float) -> LossStep:
    mask = torch.ones(2, 3)
    return LossStep(context=context, model=None, inputs={}, per_token_logps=torch.zeros(2, 3),
                    entropies=torch.full((2, 3), entropy), mask=mask, entropy_mask=None, accumulation=1.0,
                    mode="train")


def test_maxent_auto_measures_with_no_bonus_then_hands_trls_controller_its_state() -> None:
    method = MaxEntEntropy(method_args(maxent_entropy_target="auto"), hooks=None)
    context = _context()
    method.before_loss(context)  # measuring: TRL's controller off, no bonus
    assert (context.entropy_bonus.coef, context.entropy_bonus.adaptive) == (0.0, False)
    method.loss_term(_step(context, 0.4))  # the first optimizer step measures H* = 0.4
    method.before_loss(context)
    bonus = context.entropy_bonus
    assert (bonus.adaptive, bonus.target, bonus.coef, bonus.last_world_entropy) == (True, pytest.approx(0.4), 0.0,
                                                                                    math.inf)
    bonus.coef, bonus.last_world_entropy = 0.005, 0.3  # what TRL's loss did: entropy below H*, coefficient up
    method.loss_term(_step(context, 0.3))
    assert (method.controller.entropy_coef, method.controller.last_world_entropy) == (0.005, 0.3)
    assert context.metrics["train"]["maxent/alpha"] == [0.0, 0.005]


def test_maxent_dual_descent_sets_the_coefficient_for_the_next_loss() -> None:
    method = MaxEntEntropy(method_args(maxent_entropy_target=1.0, maxent_alpha_lr=0.5), hooks=None)
    context = _context()
    method.before_loss(context)
    assert (context.entropy_bonus.coef, context.entropy_bonus.adaptive) == (0.0, False)
    method.loss_term(_step(context, 0.2))  # alpha <- max(0, 0 - 0.5 (0.2 - 1.0)) = 0.4
    method.before_loss(context)
    assert context.entropy_bonus.coef == pytest.approx(0.4) and not context.entropy_bonus.adaptive
    assert MaxEntEntropy.drives_entropy_bonus(method.args) and not Method.drives_entropy_bonus(method.args)
    assert MaxEntEntropy.stage is Stage.LOSS


def test_trainer_hands_the_bonus_to_trls_loss_and_gives_the_config_its_target_back() -> None:
    trainer = SimpleNamespace(_drives_entropy_bonus=True, args=SimpleNamespace(entropy_target=0.2),
                              entropy_coef=0.0, use_adaptive_entropy=False, _last_world_entropy=math.inf)
    bonus = EntropyBonus(coef=0.01, adaptive=True, target=0.07, last_world_entropy=0.05)
    with DivRLTrainer._methods_entropy_bonus(trainer, bonus):
        assert (trainer.entropy_coef, trainer.use_adaptive_entropy, trainer.args.entropy_target,
                trainer._last_world_entropy) == (0.01, True, 0.07, 0.05)
        trainer.entropy_coef, trainer._last_world_entropy = 0.015, 0.06  # TRL's adaptive rule at a step
    assert (bonus.coef, bonus.last_world_entropy) == (0.015, 0.06) and trainer.args.entropy_target == 0.2
    untouched = SimpleNamespace(_drives_entropy_bonus=False, entropy_coef=0.3, use_adaptive_entropy=True)
    with DivRLTrainer._methods_entropy_bonus(untouched, EntropyBonus()):  # TRL's own settings, no MaxEnt
        assert (untouched.entropy_coef, untouched.use_adaptive_entropy) == (0.3, True)
