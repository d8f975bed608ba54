"""Thin presets: a `DivRLTrainer` with one method switched on, with the values its method file declares (fields
the user did not set get the preset; a value the user set, even one equal to the default such as
`novelty_coef=0.0`, is kept).

Each accepts exactly DivRLTrainer's arguments; combine methods with `DivRLTrainer` and a `DivRLConfig`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from divrl.methods import presets_of
from divrl.trainers.divrl_trainer import DivRLTrainer


class IPSGRPOTrainer(DivRLTrainer):
    """IPS-GRPO (the IPS paper): rewards divided by their outcome's in-group frequency."""

    preset: ClassVar[dict[str, Any]] = presets_of("ips")


class QDGRPOTrainer(DivRLTrainer):
    """QD-GRPO (the execution-rewards paper, Sec. 4.1): MAP-Elites archive bonuses for new and improved behaviour
    cells."""

    preset: ClassVar[dict[str, Any]] = presets_of("qd")


class MaxEntGRPOTrainer(DivRLTrainer):
    """MaxEnt-GRPO (the execution-rewards paper, Sec. 4.2) with the paper's values: entropy target H* = 1.0, novelty
    gamma = 0.3,
    L = 3 length bins."""

    preset: ClassVar[dict[str, Any]] = presets_of("maxent_entropy", "novelty", "length_bins")


class DivergenceGRPOTrainer(DivRLTrainer):
    """DPH-RL (Li et al., 2025): a mass-covering divergence to the initial policy; Jensen-Shannon unless configured."""

    preset: ClassVar[dict[str, Any]] = presets_of("divergence")


class PopulationGRPOTrainer(DivRLTrainer):
    """Population-GRPO (the execution-rewards paper, Sec. 4.3): K LoRA members on one base model, scored, souped and
    perturbed
    (see `divrl.trainers.population`); combine with any other method through the config."""

    preset: ClassVar[dict[str, Any]] = presets_of("population")


class FlowRLTrainer(DivRLTrainer):
    """FlowRL (Zhu et al. 2025; the IPS paper's baseline): trajectory balance with a learned log Z replaces GRPO's
    surrogate (see `divrl.methods.flowrl`); reward scale beta_r = 15 and importance clip 0.2 unless configured."""

    preset: ClassVar[dict[str, Any]] = presets_of("flowrl")


class CountBonusGRPOTrainer(DivRLTrainer):
    """Outcome-count bonus (historical UCB exploration, Song, Kempe & Munos 2025): c / sqrt(1 + n(x, o)) for a
    valid outcome o sampled n times for prompt x so far; c = 0.5 unless configured (divrl choice, half the validity
    reward of HypoSpace)."""

    preset: ClassVar[dict[str, Any]] = presets_of("count_bonus")


class UnlikelinessGRPOTrainer(DivRLTrainer):
    """Unlikeliness reward (He, Fried & Welleck 2025): rewards times 1 - beta * rank / G, rank by the sample's mean
    log-prob in its group (0 = least likely); beta = 0.25 unless configured (the paper's release)."""

    preset: ClassVar[dict[str, Any]] = presets_of("unlikeliness")


class PassAtKGRPOTrainer(DivRLTrainer):
    """Pass@k Training (Chen et al. 2025): advantages of the best-of-k objective in closed form; k = 4 unless
    configured (divrl choice: half of TRL's default group of 8)."""

    preset: ClassVar[dict[str, Any]] = presets_of("passk")
