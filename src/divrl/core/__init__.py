"""Core diversity algorithms as small pure functions and classes; trainers and the toy backend both call them."""

from divrl.core.advantages import (
    flat_groups,
    flat_rows,
    group_advantages,
    length_bins,
    length_conditional_advantages,
    without_flat_groups,
)
from divrl.core.archive import AddStatus, ArchiveStats, GridArchive, archive_bonus
from divrl.core.counts import COUNT_SCOPES, OutcomeCounts
from divrl.core.covariance import clip_cov_selection, kl_cov_selection, ppo_clipped, token_covariance
from divrl.core.divergence import (
    DIVERGENCES,
    exact_divergence,
    per_token_divergence,
    policy_sample_divergence_loss,
    truncated_importance_weights,
)
from divrl.core.entropy import AdaptiveEntropyCoefficient
from divrl.core.flowrl import FLOWRL_BETA, FLOWRL_IMPORTANCE_CLIP, trajectory_balance_loss
from divrl.core.ips import IPSResult, group_outcome_frequencies, ips_scale, ips_scale_exact
from divrl.core.masked import masked_mean
from divrl.core.metrics import (
    distinct_outcomes,
    empirical_distribution,
    kl_divergence,
    l1_distance,
    mean_pairwise_cosine_distance,
    outcome_entropy,
    vendi_score,
    vendi_score_of_embeddings,
    vendi_score_of_keys,
)
from divrl.core.novelty import NoveltyMemory, hashed_ngram_embedding
from divrl.core.passk import passk_advantages
from divrl.core.population import (
    average_state_dicts,
    lora_soup_delta,
    perturb_relative_,
    project_to_rank,
    select_top,
    selection_scores,
)
from divrl.core.semantic import LeaderClusters
from divrl.core.unlikeliness import unlikeliness_factors

__all__ = [
    "COUNT_SCOPES",
    "DIVERGENCES",
    "FLOWRL_BETA",
    "FLOWRL_IMPORTANCE_CLIP",
    "AdaptiveEntropyCoefficient",
    "AddStatus",
    "ArchiveStats",
    "GridArchive",
    "IPSResult",
    "LeaderClusters",
    "NoveltyMemory",
    "OutcomeCounts",
    "archive_bonus",
    "average_state_dicts",
    "clip_cov_selection",
    "distinct_outcomes",
    "empirical_distribution",
    "exact_divergence",
    "flat_groups",
    "flat_rows",
    "group_advantages",
    "group_outcome_frequencies",
    "hashed_ngram_embedding",
    "ips_scale",
    "ips_scale_exact",
    "kl_cov_selection",
    "kl_divergence",
    "l1_distance",
    "length_bins",
    "length_conditional_advantages",
    "lora_soup_delta",
    "masked_mean",
    "mean_pairwise_cosine_distance",
    "outcome_entropy",
    "passk_advantages",
    "per_token_divergence",
    "policy_sample_divergence_loss",
    "perturb_relative_",
    "ppo_clipped",
    "project_to_rank",
    "select_top",
    "selection_scores",
    "token_covariance",
    "trajectory_balance_loss",
    "unlikeliness_factors",
    "vendi_score",
    "vendi_score_of_embeddings",
    "vendi_score_of_keys",
    "truncated_importance_weights",
    "without_flat_groups",
]
