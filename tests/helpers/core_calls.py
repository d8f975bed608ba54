"""A valid call of every public function and method of divrl.core (issue 44), for test_core_inputs.py: each entry
names the callable and its keyword arguments, so a test can replace one argument with bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from divrl import core


def _archive() -> core.GridArchive:
    return core.GridArchive([4, 4], [(0.0, 1.0), (0.0, 1.0)])


def _soup_block() -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    return [(torch.ones(2, 3), torch.ones(3, 2), 1.0)]


def _t(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(0))


# name -> (callable, valid keyword arguments). Methods are called on a fresh instance.
CALLS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "GridArchive": (core.GridArchive, {"dims": [4, 4], "ranges": [(0.0, 1.0), (0.0, 1.0)], "qd_score_offset": 0.0}),
    "GridArchive.add": (lambda **kw: _archive().add(**kw), {"descriptors": [[0.1, 0.2]], "objectives": [1.0]}),
    "GridArchive.cell_index": (lambda **kw: _archive().cell_index(**kw), {"descriptors": [[0.1, 0.2]]}),
    "archive_bonus": (core.archive_bonus, {"statuses": [core.AddStatus.NEW], "beta_new": 1.0, "beta_imp": 0.3}),
    "LeaderClusters": (core.LeaderClusters, {"threshold": 0.6, "max_leaders": 8}),
    "LeaderClusters.assign": (lambda **kw: core.LeaderClusters().assign(**kw), {"embeddings": _t(3, 4)}),
    "NoveltyMemory": (core.NoveltyMemory, {"capacity": 8, "k": 2, "gamma": 0.3}),
    "NoveltyMemory.score": (lambda **kw: core.NoveltyMemory().score(**kw), {"embeddings": _t(3, 4)}),
    "NoveltyMemory.add": (lambda **kw: core.NoveltyMemory().add(**kw), {"embeddings": _t(3, 4)}),
    "OutcomeCounts": (core.OutcomeCounts, {"coef": 0.5, "scope": "prompt"}),
    "OutcomeCounts.bonus": (lambda **kw: core.OutcomeCounts(0.5).bonus(**kw), {"contexts": ["p", "p"],
                                                                              "keys": ["a", None]}),
    "average_state_dicts": (core.average_state_dicts, {"state_dicts": [{"w": _t(2)}, {"w": _t(2)}],
                                                       "weights": [0.5, 0.5]}),
    "clip_cov_selection": (core.clip_cov_selection, {"covariance": _t(2, 5), "ratio": 0.2, "low": 0.0, "high": 1.0}),
    "distinct_outcomes": (core.distinct_outcomes, {"keys": ["a", "b", None]}),
    "empirical_distribution": (core.empirical_distribution, {"keys": ["a", "b"], "support": ["a", "b"]}),
    "exact_divergence": (core.exact_divergence, {"p_policy": torch.tensor([0.5, 0.5]),
                                                 "p_ref": torch.tensor([0.25, 0.75]), "kind": "forward_kl",
                                                 "alpha": 0.5}),
    "flat_groups": (core.flat_groups, {"rewards": [1.0, 1.0, 0.0, 1.0], "group_size": 2, "rtol": 1e-6}),
    "flat_rows": (core.flat_rows, {"rewards": [1.0, 1.0, 0.0, 1.0], "group_size": 2, "rtol": 1e-6}),
    "group_advantages": (core.group_advantages, {"rewards": [1.0, 0.0, 0.5, 1.0], "group_size": 2, "scale": "group",
                                                 "eps": 1e-4}),
    "group_outcome_frequencies": (core.group_outcome_frequencies, {"keys": ["a", "a", "b", None], "group_size": 2}),
    "hashed_ngram_embedding": (core.hashed_ngram_embedding, {"texts": ["abc", "abd"], "dim": 16, "n": 3}),
    "ips_scale": (core.ips_scale, {"rewards": torch.tensor([1.0, 1.0, 0.0, 1.0]), "keys": ["a", "a", None, "b"],
                                   "group_size": 2, "epsilon": 1e-3}),
    "ips_scale_exact": (core.ips_scale_exact, {"rewards": torch.tensor([1.0, 0.5]), "probs": torch.tensor([0.5, 0.2]),
                                               "epsilon": 1e-3}),
    "kl_cov_selection": (core.kl_cov_selection, {"covariance": _t(2, 5), "ratio": 0.2}),
    "kl_divergence": (core.kl_divergence, {"p": [0.5, 0.5], "q": [0.25, 0.75], "eps": 1e-12}),
    "l1_distance": (core.l1_distance, {"p": [0.5, 0.5], "q": [0.25, 0.75]}),
    "length_bins": (core.length_bins, {"lengths": [3.0, 5.0, 2.0, 9.0], "group_size": 2, "num_bins": 2}),
    "length_conditional_advantages": (core.length_conditional_advantages, {
        "rewards": [1.0, 0.0, 0.5, 1.0], "lengths": [3.0, 5.0, 2.0, 9.0], "group_size": 2, "num_bins": 2,
        "eps": 1e-4, "scale": "group"}),
    "lora_soup_delta": (core.lora_soup_delta, {"factors": _soup_block(), "weights": [1.0]}),
    "masked_mean": (core.masked_mean, {"values": _t(2, 3), "mask": torch.ones(2, 3), "dim": 1}),
    "mean_pairwise_cosine_distance": (core.mean_pairwise_cosine_distance, {"x": _t(3, 4)}),
    "outcome_entropy": (core.outcome_entropy, {"probs": [0.5, 0.5]}),
    "passk_advantages": (core.passk_advantages, {"rewards": [1.0, 0.0, 0.0, 1.0], "group_size": 2, "k": 1,
                                                 "scale": True, "eps": 1e-4}),
    "per_token_divergence": (core.per_token_divergence, {"logp_policy": -_t(2, 3), "logp_ref": -_t(2, 3),
                                                         "kind": "forward_kl", "samples_from": "policy", "alpha": 0.5}),
    "policy_sample_divergence_loss": (core.policy_sample_divergence_loss, {
        "logp_policy": -_t(2, 3), "logp_ref": -_t(2, 3), "kind": "forward_kl", "alpha": 0.5, "sample_weight": None}),
    "ppo_clipped": (core.ppo_clipped, {"advantages": _t(2, 3), "log_ratio": _t(2, 3) * 0.1, "clip_low": 0.2,
                                       "clip_high": 0.2}),
    "project_to_rank": (core.project_to_rank, {"delta": _t(4, 3), "rank": 2, "scale": 1.0}),
    "select_top": (core.select_top, {"scores": torch.tensor([0.1, 0.9, 0.5]), "m": 2}),
    "selection_scores": (core.selection_scores, {"diversity": torch.tensor([0.1, 0.9]),
                                                 "max_reward": torch.tensor([1.0, 0.5])}),
    "token_covariance": (core.token_covariance, {"logps": -_t(2, 3), "advantages": _t(2), "mask": torch.ones(2, 3)}),
    "trajectory_balance_loss": (core.trajectory_balance_loss, {
        "log_z": _t(2), "seq_logp_policy": -_t(2), "seq_logp_ref": -_t(2), "lengths": torch.tensor([3.0, 4.0]),
        "normalised_rewards": _t(2), "beta_r": 15.0, "seq_logp_old": None, "importance_clip": 0.2}),
    "unlikeliness_factors": (core.unlikeliness_factors, {"sequence_logps": [-1.0, -2.0, -0.5, -3.0], "group_size": 2,
                                                         "beta": 0.5}),
    "vendi_score": (core.vendi_score, {"similarity": torch.eye(3)}),
    "vendi_score_of_embeddings": (core.vendi_score_of_embeddings, {"x": _t(3, 4)}),
    "vendi_score_of_keys": (core.vendi_score_of_keys, {"keys": ["a", "b", None]}),
    "truncated_importance_weights": (core.truncated_importance_weights, {"log_ratio": _t(2, 3) * 0.1, "low": 0.5,
                                                                         "high": 2.0}),
    "without_flat_groups": (core.without_flat_groups, {"advantages": _t(4), "rewards": [1.0, 1.0, 0.0, 1.0],
                                                       "group_size": 2, "rtol": 1e-6}),
}
