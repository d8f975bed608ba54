"""The toy backend's option tables: environments, their default training options, environment options and the
training options with their `divrl toy` flags (the divrl methods' options carry DivRLConfig's field names). No torch
import: the CLI builds its parser from them, and the runner names a bad option by its flag.
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

# Training options: argparse dest -> (flag, type, help). None defaults mean "environment default".
TRAIN_OPTIONS: dict[str, tuple[str, type, str]] = {
    "steps": ("--steps", int, "training steps (ideas: epochs)"),
    "group_size": ("--group-size", int, "samples per group G"),
    "lr": ("--lr", float, "learning rate"),
    "optimizer": ("--optimizer", str, "adam | sgd (default adam; sgd = the gradient flow of the IPS paper's theorems)"),
    "updates_per_batch": ("--updates", int, "clipped gradient steps per sampled batch"),
    "clip": ("--clip", float, "PPO ratio clip (default 0.2)"),
    "adv_scale": ("--adv-scale", str, "advantage scaling: group | batch | none (default group)"),
    "kl_coef": ("--kl-coef", float, "reverse-KL weight toward the initial policy"),
    "divergence_coef": ("--divergence-coef", float, "forward-KL / JS weight for fkl / js (default 0.1)"),
    "entropy_coef": ("--entropy-coef", float, "fixed entropy bonus"),
    "maxent_entropy_target": ("--maxent-entropy-target", float, "maxent: per-token target entropy"),
    "maxent_alpha_lr": ("--maxent-alpha-lr", float, "maxent: dual-descent step of alpha (default 0.01)"),
    "ips_epsilon": ("--ips-epsilon", float, "ips: probability floor epsilon (default 1e-3)"),
    "ips_outcome": ("--ips-outcome", str, "ips on ideas: what one outcome is: peak (the quality peak giving Q(x), "
                    "default) | grid4 (4 x 4 behaviour grid) | cell (the QD 10 x 10 cell) | semantic (leader "
                    "clustering of the idea vectors, cosine >= --semantic-threshold: no knowledge of the landscape)"),
    "semantic_threshold": ("--semantic-threshold", float, "ips on ideas with --ips-outcome semantic: cosine "
                           "similarity at which an idea joins a class (default 0.6)"),
    "qd_beta_new": ("--qd-beta-new", float, "qd: bonus for a new archive cell (default 0.5)"),
    "qd_beta_imp": ("--qd-beta-imp", float, "qd: bonus for an improved cell (default 0.3)"),
    "novelty_coef": ("--novelty-coef", float, "maxent: novelty coefficient (default 0.3)"),
    "novelty_k": ("--novelty-k", int, "maxent: nearest neighbours (default 5)"),
    "novelty_memory_size": ("--novelty-memory-size", int, "maxent: novelty memory size (default 512)"),
    "length_bins": ("--length-bins", int, "maxent: length bins L (default 3)"),
    "population_size": ("--population-size", int, "pop: members K (default 5)"),
    "population_interval": ("--population-interval", int, "pop: steps between soups T (default 10)"),
    "population_top_m": ("--population-top-m", int, "pop: members averaged M (default 3)"),
    "population_sigma": ("--population-sigma", float, "pop: restart noise relative to the soup: each member's tensors "
                         "move by this fraction of the soup tensor's norm (default 0.2; the execution-rewards paper's "
                         "absolute 0.01 is 0.2-0.34 of our MLP's hidden layers)"),
    "count_bonus_coef": ("--count-bonus-coef", float,
                         "count: bonus coefficient c of c / sqrt(1 + n(x, o)) (default 0.5)"),
    "count_bonus_scope": ("--count-bonus-scope", str,
                          "count: prompt (n per prompt and outcome, default) | global (over prompts)"),
    "unlikeliness_beta": ("--unlikeliness-beta", float, "unlikely: beta_rank of r (1 - beta rank / G) (default 0.25)"),
    "cov_ratio": ("--cov-ratio", float, "clipcov / klcov: share of tokens acted on, at least one (default 2e-4)"),
    "cov_kl_coef": ("--cov-kl-coef", float, "klcov: coefficient of |log pi - log pi_old| (default 1)"),
    "clip_high": ("--clip-high", float, "cliphigher: upper ratio clip, TRL's epsilon_high (default 0.28)"),
    "top_entropy_quantile": ("--top-entropy-quantile", float,
                             "topentropy: share of tokens by entropy the loss keeps, TRL's (default 0.2)"),
    "passk": ("--passk", int, "passk: k of the best-of-k advantages; also the k of the pass_at_k metric "
                "(default 4)"),
    "flowrl_beta": ("--flowrl-beta", float, "flowrl: reward scale beta_r (default 15, FlowRL's value for LLM "
                    "rewards; on the toys it collapses: see benchmarks/results/toy_flowrl.md)"),
}

# Flags renamed to DivRLConfig's field names (issue 30); the old ones still work, with a warning, for a release.
DEPRECATED_FLAGS: dict[str, str] = {
    "--count-coef": "count_bonus_coef", "--count-scope": "count_bonus_scope", "--beta-new": "qd_beta_new",
    "--beta-imp": "qd_beta_imp", "--novelty-gamma": "novelty_coef", "--novelty-capacity": "novelty_memory_size",
    "--dph-coef": "divergence_coef", "--passk-k": "passk", "--unlikely-beta": "unlikeliness_beta",
    "--target-entropy": "maxent_entropy_target", "--alpha-lr": "maxent_alpha_lr", "--population": "population_size",
    "--pop-interval": "population_interval", "--pop-top": "population_top_m", "--pop-sigma": "population_sigma",
}
