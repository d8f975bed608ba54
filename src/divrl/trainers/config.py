"""`DivRLConfig`: TRL's `GRPOConfig` plus the diversity methods' fields, each with its default and paper.

Papers (README, "The methods"): the execution-rewards paper = QD-/MaxEnt-/Population-GRPO (idea generation), the IPS
paper = IPS-GRPO, the DPH-RL paper = mass-covering divergences; the FlowRL baseline of the IPS paper follows Zhu et
al. 2025 (`divrl.trainers.flowrl`).
Every method is off by default, so `DivRLConfig()` trains exactly like `GRPOConfig()`.
Misconfiguration raises `ValueError` naming the field, at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from trl import GRPOConfig

from divrl.core.counts import COUNT_SCOPES
from divrl.core.divergence import DIVERGENCES
from divrl.trainers._fields import Unset, _help
from divrl.trainers.flowrl import FlowRLConfig
from divrl.trainers.population import PopulationConfig

OUTCOME_KEY_SOURCES = ("auto", "task", "text", "semantic")
SEMANTIC_EMBEDDINGS = ("ngram", "task")
ARCHIVE_SCOPES = ("global", "prompt")
NOVELTY_EMBEDDINGS = ("ngram", "hidden", "task")
DIVERGENCE_ESTIMATORS = ("policy", "rehearsal")
COVARIANCE_METHODS = ("clip_cov", "kl_cov")
CONSOLE_LOGS = ("trl", "compact")




@dataclass
class DivRLConfig(FlowRLConfig, PopulationConfig, GRPOConfig):
    """GRPOConfig plus IPS, QD, MaxEnt (entropy, novelty, length bins) and divergence fields.

    The fields below document their default and source paper; see the module docstring for the papers.
    """

    # --- IPS (the IPS paper): rewards divided by the in-group frequency of their outcome ---
    ips: bool = field(default=Unset(False), metadata=_help(
        "Inverse probability scaling of rewards (the IPS paper, Eq. 9). Default False."))
    ips_epsilon: float = field(default=1e-3, metadata=_help(
        "Probability floor epsilon in r / max(p_hat, epsilon) (the IPS paper, Eq. 9; the paper ablates it). "
        "Default 1e-3, inactive while 1/G > epsilon."))
    ips_outcome_key: str = field(default="auto", metadata=_help(
        "Where outcome keys come from: 'task' (task.outcome_key), 'text' (normalised completion text) or "
        "'auto' (the task hook when present, else text, with a warning) or 'semantic' (classes of similar "
        "completions by leader clustering of embeddings, for free text: see semantic_*). The IPS paper keys "
        "outcomes by equivalence class (canonical hypothesis, scaffold); the text and semantic keys are divrl's. The "
        "count bonus uses the same keys. Default 'auto'."))
    semantic_threshold: float = field(default=0.6, metadata=_help(
        "ips_outcome_key='semantic': cosine similarity at which a completion joins an existing class (leader "
        "clustering; classes persist across steps and checkpoints). DARLING (Li et al. 2025) partitions answers with "
        "a learned classifier; this offline stand-in is a divrl choice: on hashed 3-grams, paraphrases sharing words "
        "score 0.5-0.8 and unrelated sentences about 0.1. Default 0.6."))
    semantic_embedding: str = field(default="ngram", metadata=_help(
        "ips_outcome_key='semantic': what is clustered: 'ngram' (hashed character 3-grams, offline, deterministic) "
        "or 'task' (task.embed, e.g. a sentence encoder). Default 'ngram'."))
    semantic_max_classes: int = field(default=4096, metadata=_help(
        "ips_outcome_key='semantic': most classes kept; beyond it a completion joins its most similar class "
        "(bounds memory and time). Default 4096."))

    # --- Cross-step outcome-count bonus (historical UCB exploration, Song, Kempe & Munos 2025) ---
    count_bonus_coef: float = field(default=Unset(0.0), metadata=_help(
        "Coefficient c of the bonus c / sqrt(1 + n(x, o)) added to a valid completion (the task's first reward "
        "function scores it above 0), n(x, o) = how often outcome o was sampled for prompt x so far in training, "
        "this step included (the paper's historical exploration; counting this step too makes repeats inside "
        "the group earn less, order-free: divrl choice). Counts are checkpointed. Default 0.0 (off)."))
    count_bonus_scope: str = field(default="prompt", metadata=_help(
        "'prompt': count each (prompt, outcome) (the paper's n(x, a)); 'global': count outcomes over all prompts, "
        "so one answer written for every observation is penalised (divrl option). Default 'prompt'."))

    # --- Unlikeliness reward ("Rewarding the Unlikely", He, Fried & Welleck 2025) ---
    unlikeliness_beta: float = field(default=Unset(0.0), metadata=_help(
        "beta_rank of the unlikeliness reward: the task rewards of a group's samples are multiplied by "
        "1 - beta * rank / G, rank = position by mean per-token log-prob under the sampling policy (0 = least "
        "likely), so a likely correct sample earns less than an unlikely one. Log-probs come from the sampler "
        "(vLLM's, or divrl's CPU sampler: free) when present, else one no-grad forward over the completions. The "
        "paper's release uses 0.25. Default 0.0 (off)."))

    # --- Pass@k objective (Pass@k Training, Chen et al. 2025) ---
    passk: int = field(default=Unset(0), metadata=_help(
        "k of the pass@k (best-of-k) objective: advantages become the mean advantage of the k-subsets of the group "
        "holding each sample, a subset scored by its best reward and normalised over the subsets (Pass@k Training's "
        "analytical derivation, exact for any reward: `divrl.core.passk_advantages`). Replaces TRL's group "
        "normalisation; `scale_rewards='none'` only centres. 0 = off; 2 <= k < num_generations. Default 0."))

    # --- QD (the execution-rewards paper, Sec. 4.1): MAP-Elites archive bonuses ---
    qd: bool = field(default=Unset(False), metadata=_help(
        "Quality-diversity archive bonuses (the execution-rewards paper, Eq. 3); needs a task with a `behavior` hook. "
        "Default False."))
    qd_dims: list[int] | None = field(default=None, metadata=_help(
        "Cells per behaviour dimension. Default None = 10 cells per dimension of task.behavior_dims "
        "(the execution-rewards paper: a 10 x 10 grid)."))
    qd_ranges: list[float] | None = field(default=None, metadata=_help(
        "Descriptor range per dimension, flattened [low0, high0, low1, high1, ...] (pairs also accepted). "
        "Default None = [0, 1] per dimension (the execution-rewards paper)."))
    qd_beta_new: float = field(default=0.5, metadata=_help(
        "Bonus for a completion that fills an empty cell (the execution-rewards paper: beta_new = 0.5). Default 0.5."))
    qd_beta_imp: float = field(default=0.3, metadata=_help(
        "Bonus for a completion that improves a cell's elite (the execution-rewards paper: beta_imp = 0.3). Default "
        "0.3."))
    qd_min_reward: float = field(default=0.0, metadata=_help(
        "Archive (and pay a bonus to) only completions whose first reward function scores above this, so an output "
        "the task scores 0 (an invalid answer, a molecule the sanity gate rejects) never fills or improves a cell. "
        "Default 0.0."))
    qd_archive: str = field(default="global", metadata=_help(
        "'global': one archive for all prompts (the execution-rewards paper has a single context); 'prompt': one "
        "archive per "
        "distinct prompt. Default 'global'."))

    # --- MaxEnt (the execution-rewards paper, Sec. 4.2): adaptive entropy bonus, kNN novelty, length-conditional
    # advantages ---
    maxent_entropy_target: float | None = field(default=Unset(None), metadata=_help(
        "Target per-token entropy H* for the dual-descent entropy coefficient (the execution-rewards paper, Eq. 4; the "
        "paper's "
        "default H* = 1.0). It drives TRL's entropy bonus coefficient `entropy_coef`. Default None (off)."))
    maxent_alpha_lr: float = field(default=0.01, metadata=_help(
        "Dual-descent step size: alpha <- max(0, alpha - lr (H - H*)) per optimizer step (the execution-rewards paper "
        "gives no "
        "value). Default 0.01."))
    maxent_alpha_init: float = field(default=0.0, metadata=_help(
        "Initial entropy coefficient alpha (the execution-rewards paper gives none; 0 lets dual descent raise it only "
        "when entropy "
        "falls below the target: divrl choice). Default 0.0."))
    maxent_alpha_max: float | None = field(default=None, metadata=_help(
        "Upper bound on alpha (None = unbounded, as in the execution-rewards paper). Default None."))
    novelty_coef: float = field(default=Unset(0.0), metadata=_help(
        "Novelty coefficient gamma of the kNN novelty bonus (the execution-rewards paper, Eq. 5: gamma = 0.3). Default "
        "0.0 (off)."))
    novelty_memory_size: int = field(default=512, metadata=_help(
        "Rolling memory size M of past completion embeddings (the execution-rewards paper: 512). Default 512."))
    novelty_k: int = field(default=5, metadata=_help(
        "Nearest neighbours k (the execution-rewards paper: 5). Default 5."))
    novelty_embedding: str = field(default="ngram", metadata=_help(
        "Completion embedding: 'ngram' (hashed character 3-grams, cheap, deterministic), 'hidden' (the policy's "
        "mean-pooled last hidden state over the completion: one extra no-grad forward) or 'task' (task.embed). "
        "The execution-rewards paper's simulated ideas are vectors already (kNN over them, k=5, memory 512); for text "
        "the cheap "
        "default is a divrl choice. Default 'ngram'."))
    length_bins: int = field(default=Unset(0), metadata=_help(
        "Number L of completion-length percentile bins inside each group for length-conditional advantage "
        "normalisation (the execution-rewards paper, Eq. 6: L = 3; centred within each bin, then scaled as "
        "`scale_rewards` says: "
        "by the bin's std for 'group'). 0 = off (TRL's normalisation). Default 0."))

    # --- Covariance-targeted entropy control (Cui et al. 2025, verl's clip_cov / kl_cov policy losses) ---
    cov_method: str | None = field(default=Unset(None), metadata=_help(
        "'clip_cov': stop the policy gradient of a random cov_ratio share of the completion tokens whose "
        "covariance (A - mean A)(log pi - mean log pi) lies in cov_clip_bounds (tokens PPO's clip already stops "
        "excluded); 'kl_cov': add cov_kl_coef |log pi - log pi_old| on the top cov_ratio share of tokens by "
        "covariance (acts only when a batch is reused: num_iterations > 1, or steps_per_generation > "
        "gradient_accumulation_steps, or vLLM's importance correction; TRL's clipped surrogate is kept where verl's "
        "kl_cov drops the clip). Default None (off)."))
    cov_ratio: float = field(default=2e-4, metadata=_help(
        "Share of completion tokens Clip-Cov / KL-Cov act on (at least one per micro-batch; verl's default 2e-4). "
        "Default 2e-4."))
    cov_clip_bounds: list[float] = field(default_factory=lambda: [1.0, 5.0], metadata=_help(
        "Clip-Cov: (low, high) covariance bounds of the eligible tokens (verl's defaults). Default [1.0, 5.0]."))
    cov_kl_coef: float = field(default=1.0, metadata=_help(
        "KL-Cov: coefficient of |log pi - log pi_old| on the selected tokens (verl's ppo_kl_coef). Default 1.0."))

    # --- Divergence to the initial policy (the DPH-RL paper, DPH-RL) ---
    divergence: str | None = field(default=Unset(None), metadata=_help(
        "Divergence to the reference (initial) policy added to the loss: 'reverse_kl', 'forward_kl', 'js' or "
        "'alpha' (the DPH-RL paper recommends the mass-covering forward_kl / js). Adds to TRL's `beta` k3 term; set "
        "beta=0 to replace it. On policy samples the loss carries the score-function term, so each option "
        "trains its own divergence (TRL's k3 used as a loss has the forward KL's gradient: 'reverse_kl' here is "
        "the true reverse KL, not TRL's beta). Default None (off)."))
    divergence_coef: float = field(default=0.05, metadata=_help(
        "Coefficient of the divergence term (the DPH-RL paper sweeps it; no single value). Default 0.05."))
    divergence_alpha: float = field(default=0.5, metadata=_help(
        "alpha of the alpha-divergence (0 -> reverse KL, 1 -> forward KL; the DPH-RL paper's family, 0.5 = the "
        "midpoint, a divrl choice). Default 0.5."))
    divergence_estimator: str = field(default="policy", metadata=_help(
        "'policy': estimate on the policy's own samples (no extra generation; weighted by pi / pi_sampler when "
        "the batch was sampled by an older policy or by vLLM); "
        "'rehearsal': on pre-sampled reference completions with stored reference log-probs (the DPH-RL paper; build "
        "them with `divrl sample-reference`). Default 'policy'."))
    divergence_rehearsal_path: str | None = field(default=None, metadata=_help(
        "Directory written by `divrl sample-reference` (needed by divergence_estimator='rehearsal'; the DPH-RL paper's "
        "reference-sample estimator). Default None."))
    divergence_rehearsal_batch_size: int = field(default=4, metadata=_help(
        "Rehearsal completions per micro-batch and process (one extra policy forward over them per step; "
        "divrl choice). Default 4."))

    # --- Groups without signal (divrl) ---
    zero_flat_groups: bool = field(default=False, metadata=_help(
        "Give every completion of a group whose summed (post-shaping) reward is the same for all of them advantage "
        "exactly 0 (`core.flat_groups`: max - min within 1e-6 relative). Without it, TRL's fp32 normalisation "
        "leaves such a group a same-signed residue (eight rewards of 1.2: +1.2e-3 each), a small push toward "
        "whatever was sampled on every step where all completions are equally good. divrl choice; off by default so "
        "that runs match GRPOConfig's. Default False."))

    # --- Where a completion ends (divrl) ---
    stop_strings: list[str] | None = field(default=None, metadata=_help(
        "Strings that end a completion, as EOS does: generation stops at the first one (transformers "
        "`stop_strings`, vLLM `stop`), the tokens after it are masked out of the loss, and the reward functions "
        "read the text up to and including it. None = the task's `stop_strings` (HypoSpace: the END line that "
        "closes each worked example of its base prompts); [] = none. divrl choice. Default None."))

    # --- Console (divrl) ---
    console_log: str = field(default="trl", metadata=_help(
        "What the console shows at each logging step: 'trl' = transformers' progress bar and the full metric dict "
        "(TRL's behaviour); 'compact' = one line (step, validity, distinct valid answers, entropy, seconds), with "
        "every metric appended to <output_dir>/metrics.jsonl as it is logged. divrl choice. Default 'trl'."))

    def __post_init__(self) -> None:
        self._resolve_unset()
        super().__post_init__()
        self.validate()

    def _resolve_unset(self) -> None:
        """Give every field still holding its `Unset` default its value, and remember it as not set by the user."""
        unset = set(getattr(self, "_unset_fields", ()))
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, Unset):
                setattr(self, spec.name, value.value)
                unset.add(spec.name)
        self._unset_fields = unset

    def apply_preset(self, preset: dict[str, Any]) -> None:
        """Set the preset's fields that the user left unset (explicit values win, even ones equal to a default),
        then validate again."""
        self._resolve_unset()
        for name, value in preset.items():
            spec = self.__dataclass_fields__.get(name)
            if spec is None or not isinstance(spec.default, Unset):
                raise ValueError(f"DivRLConfig.{name} cannot take a preset: its default is not an Unset marker")
            if name in self._unset_fields:
                setattr(self, name, value)
                self._unset_fields.discard(name)
        self.validate()

    def validate(self) -> None:
        """Check the divrl fields (also re-run after a preset trainer switches its method on)."""
        self.qd_ranges = _as_range_pairs(self.qd_ranges)
        self.validate_population()
        self.validate_flowrl()
        _check_choice("console_log", self.console_log, CONSOLE_LOGS)
        _check_choice("ips_outcome_key", self.ips_outcome_key, OUTCOME_KEY_SOURCES)
        _check_choice("qd_archive", self.qd_archive, ARCHIVE_SCOPES)
        _check_choice("semantic_embedding", self.semantic_embedding, SEMANTIC_EMBEDDINGS)
        _check(math.isfinite(self.semantic_threshold) and -1 <= self.semantic_threshold <= 1, "semantic_threshold",
               f"must be a cosine similarity in [-1, 1], got {self.semantic_threshold}")
        _check(self.semantic_max_classes >= 1, "semantic_max_classes", f"must be >= 1, got {self.semantic_max_classes}")
        _check_choice("novelty_embedding", self.novelty_embedding, NOVELTY_EMBEDDINGS)
        _check_choice("divergence_estimator", self.divergence_estimator, DIVERGENCE_ESTIMATORS)
        if self.divergence is not None:
            _check_choice("divergence", self.divergence, DIVERGENCES)
        _check(self.ips_epsilon > 0, "ips_epsilon", f"must be > 0, got {self.ips_epsilon}")
        _check_choice("count_bonus_scope", self.count_bonus_scope, COUNT_SCOPES)
        _check(math.isfinite(self.count_bonus_coef) and self.count_bonus_coef >= 0, "count_bonus_coef",
               f"must be a finite number >= 0 (0 = off), got {self.count_bonus_coef}")
        if self.cov_method is not None:
            _check_choice("cov_method", self.cov_method, COVARIANCE_METHODS)
            _check(0 < self.cov_ratio <= 1, "cov_ratio", f"must be in (0, 1], got {self.cov_ratio}")
            _check(len(self.cov_clip_bounds) == 2 and self.cov_clip_bounds[0] < self.cov_clip_bounds[1],
                   "cov_clip_bounds", f"must be [low, high] with low < high, got {self.cov_clip_bounds}")
            _check(self.cov_kl_coef >= 0, "cov_kl_coef", f"must be >= 0, got {self.cov_kl_coef}")
            reused = (self.gradient_accumulation_steps % (self.steps_per_generation * self.num_iterations) != 0
                      or (self.use_vllm and self.vllm_importance_sampling_correction))
            _check(self.cov_method != "kl_cov" or reused, "cov_method",
                   "'kl_cov' penalises |log pi - log pi_old|, which is 0 with zero gradient on a batch used once: "
                   "set num_iterations > 1 (or steps_per_generation > gradient_accumulation_steps)")
        _check(0 <= self.unlikeliness_beta <= 1, "unlikeliness_beta",
               f"must be in [0, 1] (0 = off; the factor 1 - beta * rank / G stays >= 0), got {self.unlikeliness_beta}")
        _check(self.passk == 0 or 2 <= self.passk < self.num_generations, "passk",
               f"must be 0 (off) or >= 2 and below num_generations ({self.num_generations}; at k = G every sample is "
               f"in the one subset, so every advantage is 0), got {self.passk}")
        if self.passk_enabled:
            _check(not self.length_bins_enabled, "passk", "and length_bins both replace the advantages; choose one")
            _check(self.scale_rewards in ("group", "none"), "passk",
                   f"normalises by the std of each group's subset maxima: use scale_rewards 'group' or 'none', "
                   f"got {self.scale_rewards!r}")
            _check(self.multi_objective_aggregation == "sum_then_normalize", "passk",
                   "needs multi_objective_aggregation='sum_then_normalize' (subsets are scored by the summed reward)")
        _check(self.qd_dims is None or (len(self.qd_dims) > 0 and all(int(d) >= 1 for d in self.qd_dims)),
               "qd_dims", f"must list >= 1 cells per dimension, got {self.qd_dims}")
        _check(self.qd_ranges is None or all(low < high for low, high in self.qd_ranges),
               "qd_ranges", f"every (low, high) needs low < high, got {self.qd_ranges}")
        _check(self.qd_dims is None or self.qd_ranges is None or len(self.qd_dims) == len(self.qd_ranges),
               "qd_ranges", f"has {len(self.qd_ranges or [])} ranges but qd_dims has {len(self.qd_dims or [])} dims")
        _check(math.isfinite(self.qd_min_reward), "qd_min_reward", f"must be a finite number, got {self.qd_min_reward}")
        _check(self.qd_beta_new >= 0 and self.qd_beta_imp >= 0, "qd_beta_new",
               f"archive bonuses must be >= 0, got qd_beta_new={self.qd_beta_new}, qd_beta_imp={self.qd_beta_imp}")
        _check(self.maxent_alpha_lr > 0, "maxent_alpha_lr", f"must be > 0, got {self.maxent_alpha_lr}")
        _check(self.maxent_alpha_init >= 0, "maxent_alpha_init", f"must be >= 0, got {self.maxent_alpha_init}")
        _check(self.maxent_alpha_max is None or self.maxent_alpha_max >= self.maxent_alpha_init,
               "maxent_alpha_max", f"must be >= maxent_alpha_init, got {self.maxent_alpha_max}")
        if self.maxent_entropy_target is not None:
            _check(not self.use_adaptive_entropy, "maxent_entropy_target",
                   "and use_adaptive_entropy=True are two entropy controllers; choose one")
            _check(self.entropy_coef == 0.0, "maxent_entropy_target",
                   f"drives entropy_coef itself; leave entropy_coef at 0 (got {self.entropy_coef}) and set "
                   "maxent_alpha_init for the starting value")
        _check(self.novelty_coef >= 0, "novelty_coef", f"must be >= 0, got {self.novelty_coef}")
        _check(self.novelty_memory_size >= 1, "novelty_memory_size", f"must be >= 1, got {self.novelty_memory_size}")
        _check(self.novelty_k >= 1, "novelty_k", f"must be >= 1, got {self.novelty_k}")
        _check(self.length_bins >= 0, "length_bins", f"must be >= 0 (0 = off), got {self.length_bins}")
        _check(self.length_bins <= self.num_generations, "length_bins",
               f"({self.length_bins}) cannot exceed num_generations ({self.num_generations})")
        if self.length_bins_enabled:
            _check(self.multi_objective_aggregation == "sum_then_normalize", "length_bins",
                   "needs multi_objective_aggregation='sum_then_normalize'")
        if self.qd or self.novelty_enabled or self.count_bonus_enabled:
            _check(self.multi_objective_aggregation == "sum_then_normalize", "multi_objective_aggregation",
                   "must be 'sum_then_normalize' with qd / novelty_coef / count_bonus_coef: 'normalize_then_sum' "
                   "would normalise the bonus column on its own, so the bonus coefficients would lose their scale")
        _check(self.stop_strings is None or all(isinstance(s, str) and s for s in self.stop_strings),
               "stop_strings", f"must be a list of non-empty strings, got {self.stop_strings!r}")
        _check(self.divergence_coef >= 0, "divergence_coef", f"must be >= 0, got {self.divergence_coef}")
        _check(self.divergence_rehearsal_batch_size >= 1, "divergence_rehearsal_batch_size",
               f"must be >= 1, got {self.divergence_rehearsal_batch_size}")
        if self.divergence is not None and self.divergence_estimator == "rehearsal":
            _check(self.divergence_rehearsal_path is not None, "divergence_rehearsal_path",
                   "is required by divergence_estimator='rehearsal' (create it with `divrl sample-reference`)")

    @property
    def maxent_entropy_enabled(self) -> bool:
        """Whether the dual-descent entropy coefficient drives TRL's entropy bonus."""
        return self.maxent_entropy_target is not None

    @property
    def novelty_enabled(self) -> bool:
        """Whether the kNN novelty bonus is added to rewards."""
        return self.novelty_coef > 0

    @property
    def count_bonus_enabled(self) -> bool:
        """Whether the cross-step outcome-count bonus is added to rewards."""
        return self.count_bonus_coef > 0

    @property
    def semantic_keys_enabled(self) -> bool:
        """Whether outcome keys are semantic classes (leader clustering), for a method that counts outcomes."""
        return self.ips_outcome_key == "semantic" and (self.ips or self.count_bonus_enabled)

    @property
    def unlikeliness_enabled(self) -> bool:
        """Whether rewards are scaled by the unlikeliness rank factor."""
        return self.unlikeliness_beta > 0

    @property
    def passk_enabled(self) -> bool:
        """Whether advantages are pass@k (best-of-k) advantages."""
        return self.passk >= 2

    @property
    def length_bins_enabled(self) -> bool:
        """Whether advantages are normalised within length bins (L >= 2; one bin is TRL's normalisation)."""
        return self.length_bins >= 2

    @property
    def divergence_enabled(self) -> bool:
        """Whether a divergence term to the reference policy is added to the loss."""
        return self.divergence is not None and self.divergence_coef > 0


def _check(condition: bool, name: str, problem: str) -> None:
    if not condition:
        raise ValueError(f"DivRLConfig.{name} {problem}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    _check(value in choices, name, f"must be one of {', '.join(map(repr, choices))}; got {value!r}")


def _as_range_pairs(ranges: list | None) -> list[list[float]] | None:
    """Accept [l0, h0, l1, h1, ...] or [[l0, h0], [l1, h1], ...]; return the list of pairs."""
    if ranges is None:
        return None
    if all(isinstance(r, list | tuple) for r in ranges):
        pairs = [list(map(float, r)) for r in ranges]
        _check(all(len(p) == 2 for p in pairs), "qd_ranges", f"pairs must be (low, high), got {ranges}")
        return pairs
    _check(len(ranges) % 2 == 0, "qd_ranges", f"flattened ranges need an even length, got {ranges}")
    return [[float(ranges[i]), float(ranges[i + 1])] for i in range(0, len(ranges), 2)]
