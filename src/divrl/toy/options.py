"""The toy backend's option tables: environments, their default training options, environment options and the
toy's own training options with their `divrl toy` flags; the divrl methods' options are DivRLConfig's fields, flagged
by their names (`method_flags`, from the registry), less those the toy derives or never reads (TOY_DERIVED,
TOY_INERT). No torch import: the CLI builds its parser from them, and the runner names a bad option by its flag.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

ENVS = ("bandit", "multiplicity", "hypergrid", "ideas")

# Per-environment defaults of the shared training options (the IPS paper's prototypes for the tabular
# environments, the execution-rewards paper's section 5 for ideas). Command-line values override them.
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "bandit": {"steps": 1000, "group_size": 64, "lr": 0.02, "updates_per_batch": 1, "kl_coef": 0.0,
               "entropy_coef": 0.0, "maxent_entropy_target": 1.0},
    "multiplicity": {"steps": 3000, "group_size": 32, "lr": 0.05, "updates_per_batch": 1, "kl_coef": 0.0,
                     "entropy_coef": 0.001, "maxent_entropy_target": 0.5},
    "hypergrid": {"steps": 2000, "group_size": 32, "lr": 0.05, "updates_per_batch": 1, "kl_coef": 0.0,
                  "entropy_coef": 0.001, "maxent_entropy_target": 0.5},
    "ideas": {"steps": 120, "group_size": 16, "lr": 3e-4, "updates_per_batch": 4, "kl_coef": 0.01,
              "entropy_coef": 0.0, "maxent_entropy_target": 1.0},
}

# Environment-specific options (argparse dest -> flag) and the environments that accept each.
ENV_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "rewards": ("--rewards", ("bandit",)),
    "initial_logits": ("--initial-logits", ("bandit",)),
    "reward_noise": ("--reward-noise", ("bandit",)),
    "dim": ("--dim", ("hypergrid", "ideas")),
    "side": ("--side", ("hypergrid",)),
    "r0": ("--r0", ("hypergrid",)),
    "r1": ("--r1", ("hypergrid",)),
    "r2": ("--r2", ("hypergrid",)),
    "exec_lambda": ("--exec-lambda", ("ideas",)),
    "noise": ("--noise", ("ideas",)),
    "landscape_seed": ("--landscape-seed", ("ideas",)),
}

# The toy's own training options: argparse dest -> (flag, type, help). None defaults mean "environment default".
# The divrl methods' options are `DivRLConfig`'s method fields, flags generated from the registry
# (`method_flags`).
TRAIN_OPTIONS: dict[str, tuple[str, type, str]] = {
    "steps": ("--steps", int, "training steps (ideas: epochs)"),
    "group_size": ("--group-size", int, "samples per group G"),
    "lr": ("--lr", float, "learning rate"),
    "optimizer": ("--optimizer", str, "adam | sgd (default adam; sgd = the gradient flow of the IPS paper's theorems)"),
    "updates_per_batch": ("--updates", int, "clipped gradient steps per sampled batch"),
    "clip": ("--clip", float, "PPO ratio clip (default 0.2)"),
    "adv_scale": ("--adv-scale", str, "advantage scaling: group | batch | none (default group)"),
    "kl_coef": ("--kl-coef", float, "reverse-KL weight toward the initial policy"),
    "entropy_coef": ("--entropy-coef", float, "fixed entropy bonus"),
    "ips_outcome": ("--ips-outcome", str, "ips on ideas: what one outcome is: peak (the quality peak giving Q(x), "
                    "default) | grid4 (4 x 4 behaviour grid) | cell (the QD 10 x 10 cell) | semantic (leader "
                    "clustering of the idea vectors, cosine >= --semantic-threshold: no knowledge of the landscape)"),
    "clip_high": ("--clip-high", float, "clip-higher: upper ratio clip, TRL's epsilon_high (default 0.28)"),
    "top_entropy_quantile": ("--top-entropy-quantile", float,
                             "top-entropy: share of tokens by entropy the loss keeps, TRL's (default 0.2)"),
}

# The toy's values of divrl method fields where they differ from the trainer's (under ENV_DEFAULTS and the
# command line): the execution-rewards paper's entropy target H* = 1.0 (the trainer's preset measures it: 'auto'),
# and a forward-KL / JS weight of 0.1 for fkl / js (DPH-RL sweeps it; the trainer's default is 0.05).
TOY_METHOD_DEFAULTS: dict[str, Any] = {"maxent_entropy_target": 1.0, "divergence_coef": 0.1}

# The GRPOConfig fields that a toy option stands for, in the methods' own error messages.
TRAINER_FLAGS: dict[str, str] = {"num_generations": "--group-size", "num_iterations": "--updates",
                                 "scale_rewards": "--adv-scale"}

# Flags renamed to DivRLConfig's field names (issue 30); the old ones still work, with a warning, for a release.
DEPRECATED_FLAGS: dict[str, str] = {
    "--count-coef": "count_bonus_coef", "--count-scope": "count_bonus_scope", "--beta-new": "qd_beta_new",
    "--beta-imp": "qd_beta_imp", "--novelty-gamma": "novelty_coef", "--novelty-capacity": "novelty_memory_size",
    "--dph-coef": "divergence_coef", "--passk-k": "passk", "--unlikely-beta": "unlikeliness_beta",
    "--target-entropy": "maxent_entropy_target", "--alpha-lr": "maxent_alpha_lr", "--population": "population_size",
    "--pop-interval": "population_interval", "--pop-top": "population_top_m", "--pop-sigma": "population_sigma",
}


def flag(dest: str) -> str:
    """The `divrl toy` flag of a training option or divrl method field `dest` (a method field's: `--field-name`)."""
    return TRAIN_OPTIONS[dest][0] if dest in TRAIN_OPTIONS else "--" + dest.replace("_", "-")


# Method fields the toy sets from its environment (the QD grid) and its options (what one outcome is).
TOY_DERIVED = ("ips_outcome_key", "qd_dims", "qd_ranges")

_LOG_Z_SCALAR = "the toy's log Z is one learnable scalar per member and prompt, not FlowRL's neural head"
_OWN_REFERENCE_SAMPLES = ("the toy draws its own reference samples once from its initial policy (reference_samples of "
                          "them); it reads no rehearsal set")
# Method fields that would change nothing on the toy, each with why: the LLM trainer's machinery they tune has no toy
# counterpart. `divrl toy` offers no flag for them (`method_flags`) and a TrainConfig that sets one is
# refused with the reason, rather than run as if it applied.
TOY_INERT: dict[str, str] = {
    "flowrl_log_z_layers": _LOG_Z_SCALAR,
    "flowrl_log_z_width": _LOG_Z_SCALAR,
    "flowrl_log_z_dropout": _LOG_Z_SCALAR,
    "flowrl_log_z_lr": "the toy trains its log Z scalars with the policy, by the same optimizer at --lr",
    "flowrl_importance_clip": "the toy clips FlowRL's importance weight pi / pi_old at --clip",
    "divergence_estimator": "the toy always estimates fkl / js on samples drawn once from its initial policy (the "
                            "reference-sample estimator)",
    "divergence_rehearsal_path": _OWN_REFERENCE_SAMPLES,
    "divergence_rehearsal_batch_size": _OWN_REFERENCE_SAMPLES,
    "population_soup_rank": "the toy soups its members' full parameters, not LoRA adapters: there is no rank",
    "population_held_prompts": "the toy scores its members on the selection step's own batch, not on held-out prompts",
    "novelty_embedding": "the toy's outcomes are their own embedding (the idea vector, a tabular outcome's descriptor)",
    "semantic_embedding": "the toy clusters the idea vectors themselves",
    "cov_method": "the --methods label picks it: clip-cov or kl-cov",
}

# A method field's type annotation -> what its flag parses (other types, bools and lists, have no flag).
FLAG_TYPES: dict[type, Callable[[str], Any]] = {int: int, float: float, str: str}


def _number_or_text(text: str) -> float | str:
    """A `float | str` field's flag value: a number where it reads as one (maxent_entropy_target: 1.0 or 'auto')."""
    try:
        return float(text)
    except ValueError:
        return text


def flag_type(annotation: Any) -> Callable[[str], Any] | None:
    """What the flag of a field of type `annotation` parses (`X | None` as X), or None for a field with no flag
    (booleans, lists, other types). A type, not its string: TRL's argument parser replaces the dataclass fields'
    string annotations with the types they name, so only the resolved hints are the same before and after it."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = {kind for kind in typing.get_args(annotation) if kind is not type(None)}
    elif origin is None:
        kinds = {annotation}
    else:
        return None
    if kinds == {float, str}:
        return _number_or_text
    return FLAG_TYPES.get(next(iter(kinds))) if len(kinds) == 1 else None


def method_flags() -> dict[str, tuple[Callable[[str], Any], str]]:
    """The divrl methods' flags, from the registry: each field of a registered method's `DivRLConfig` config with a
    number or text type, except those the toy derives (TOY_DERIVED) or never reads (TOY_INERT): dest -> (type, help:
    the field's first sentence)."""
    from divrl.methods import REGISTRY
    from divrl.settings_help import first_sentence

    flags = {}
    for method in REGISTRY.values():
        hints = typing.get_type_hints(method.Config)
        for spec in dataclasses.fields(method.Config):
            kind = flag_type(hints[spec.name])
            if kind is not None and spec.name not in TOY_DERIVED and spec.name not in TOY_INERT:
                flags[spec.name] = (kind, f"{method.name}: {first_sentence(spec.metadata.get('help', ''))}")
    return flags
