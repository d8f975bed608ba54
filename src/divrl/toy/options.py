"""The toy backend's option tables: environments, their default training options, environment options and the
toy's own training options with their `divrl toy` flags (the divrl methods' options are DivRLConfig's fields, flagged
by their names). No torch import: the CLI builds its parser from them, and the runner names a bad option by its flag.
"""

from __future__ import annotations

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
# (`divrl.toy.cli.method_flags`).
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
