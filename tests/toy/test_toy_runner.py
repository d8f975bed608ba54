"""Toy runner: method parsing, determinism, the IPS fixed point vs GRPO collapse, each component's effect."""

import dataclasses

import numpy as np
import pytest
import torch

from divrl.core import mean_pairwise_cosine_distance, select_top, selection_scores
from divrl.toy.envs import IdeaEnv, make_bandit, make_hypergrid, make_multiplicity_grid
from divrl.toy.methods import Method
from divrl.toy.policies import Rollout
from divrl.toy.runner import IDEA_METRICS, TABULAR_METRICS, TrainConfig, Trainer, toy_method_args, train

BANDIT = make_bandit([1, 2, 3, 4])
IDEAS_CFG = TrainConfig(steps=4, group_size=4, lr=3e-4, updates_per_batch=2, kl_coef=0.01, population_size=3,
                        population_interval=2, population_top_m=2)


def test_method_parsing():
    method = Method.parse(" pop+ips+qd ")
    assert method.name == "pop+ips+qd" and method.components == {"pop", "ips", "qd"}
    assert "ips" in method and "maxent" not in method
    assert Method.parse("ips+count").variants() == {} and Method.parse("ips+count").switched() == {"ips", "count_bonus"}
    assert Method.parse("grpo+fkl").variants() == {"divergence": "forward_kl"}


@pytest.mark.parametrize(("name", "expected"), [
    ("grpo", {"ips": False, "qd": False, "divergence": None, "cov_method": None, "passk": 0}),
    ("pop+ips+qd", {"ips": True, "qd": True, "novelty_coef": 0.0, "maxent_entropy_target": None}),
    ("grpo+fkl", {"divergence": "forward_kl"}), ("js", {"divergence": "js"}),
    ("ips+count", {"count_bonus_coef": 0.5, "unlikeliness_beta": 0.0}), ("ips+unlikely", {"unlikeliness_beta": 0.5}),
    ("passk", {"passk": 3}), ("ips+clip-cov", {"cov_method": "clip_cov"}), ("kl-cov", {"cov_method": "kl_cov"}),
    ("maxent", {"maxent_entropy_target": 0.7, "novelty_coef": 0.2, "length_bins": 2}),
])
def test_components_switch_the_divrl_config_fields(name, expected):
    """The toy's component labels reach the methods as DivRLConfig's own fields, with the run's options."""
    cfg = TrainConfig(steps=1, group_size=4, lr=0.1, count_bonus_coef=0.5, unlikeliness_beta=0.5, passk=3,
                      maxent_entropy_target=0.7, novelty_coef=0.2, length_bins=2, updates_per_batch=2)
    args = toy_method_args(IdeaEnv(), Method.parse(name), cfg)
    assert {field: getattr(args, field) for field in expected} == expected


def test_method_parsing_refuses_bad_names():
    with pytest.raises(ValueError, match="choose one"):
        Method.parse("clip-cov+kl-cov")
    with pytest.raises(ValueError, match="valid: grpo, ips, qd, maxent, pop, fkl, js, flowrl, count, unlikely, passk, "
                                         "clip-cov, kl-cov, clip-higher, top-entropy"):
        Method.parse("ips+dpo")
    with pytest.raises(ValueError, match="combines fkl and js: choose one"):
        Method.parse("fkl+js")
    with pytest.raises(ValueError, match="repeats"):
        Method.parse("ips+ips")


def test_config_validation_names_the_cli_flag_and_range():
    with pytest.raises(ValueError, match=r"--population-top-m must satisfy 1 <= M <= population_size \(2\), got 3"):
        TrainConfig(steps=1, group_size=4, lr=0.1, population_size=2, population_top_m=3)
    with pytest.raises(ValueError, match="--optimizer must be adam or sgd, got 'rmsprop'"):
        TrainConfig(steps=1, group_size=4, lr=0.1, optimizer="rmsprop")
    with pytest.raises(ValueError, match="^--group-size must be >= 2, got 1$"):
        TrainConfig(steps=1, group_size=1, lr=0.1)
    with pytest.raises(ValueError, match="--population-sigma must be >= 0, got -1"):  # not only at the first soup
        TrainConfig(steps=1, group_size=4, lr=0.1, population_sigma=-1.0)
    with pytest.raises(ValueError, match="--lr must be > 0, got nan; --updates must be >= 1, got 0"):
        TrainConfig(steps=1, group_size=4, lr=float("nan"), updates_per_batch=0)
    with pytest.raises(ValueError, match="--ips-outcome must be one of peak, grid4, cell"):
        TrainConfig(steps=1, group_size=4, lr=0.1, ips_outcome="cluster")
    with pytest.raises(ValueError, match="reference_samples must be >= 1"):  # no flag: the field name
        TrainConfig(steps=1, group_size=4, lr=0.1, reference_samples=0)
    with pytest.raises(ValueError, match="ips-exact needs a tabular"):
        train(IdeaEnv(), "ips", TrainConfig(steps=1, group_size=4, lr=0.1, ips_exact=True), [0])


# Method fields no toy run reads (checked by running each with and without the field: the curves are identical).
KNOWN_INERT = {"flowrl_log_z_layers", "flowrl_log_z_width", "flowrl_log_z_dropout", "flowrl_log_z_lr",
               "flowrl_importance_clip", "divergence_estimator", "divergence_rehearsal_path",
               "divergence_rehearsal_batch_size", "population_soup_rank", "population_held_prompts",
               "novelty_embedding", "semantic_embedding", "cov_method"}


def test_fields_the_toy_never_reads_are_refused_with_the_reason():
    """A TOY_INERT field set for a toy run is refused, naming the field and why, instead of being silently ignored;
    the table covers every field known to change nothing and holds only registered method fields."""
    import re

    from divrl.toy.runner import TOY_INERT, _default, method_fields

    assert KNOWN_INERT <= TOY_INERT.keys() <= method_fields().keys()
    assert all(reason.strip() for reason in TOY_INERT.values())
    for name, reason in TOY_INERT.items():  # any value, its default included, is refused
        with pytest.raises(ValueError, match=f"^{name} has no effect on the toy: {re.escape(reason)}$"):
            TrainConfig(steps=1, group_size=4, lr=0.1, **{name: _default(method_fields()[name])})
    with pytest.raises(ValueError, match="flowrl_log_z_lr has no effect on the toy: the toy trains its log Z scalars "
                                         "with the policy, by the same optimizer at --lr"):
        TrainConfig(steps=1, group_size=4, lr=0.1, flowrl_log_z_lr=1.0)


def test_a_methods_switch_is_refused_as_an_option():
    """ips / qd / population / flowrl are turned on by the --methods labels; set as an option they would be ignored."""
    from divrl.toy.runner import labelled_switches

    assert {"ips", "qd", "population", "flowrl"} <= labelled_switches().keys()
    assert "zero_flat_groups" not in labelled_switches()  # no label turns it on: the option is read
    with pytest.raises(ValueError, match="^population is set by the --methods labels, not as an option: "
                                         r".*\bpop\b.* turns it on$"):
        TrainConfig(steps=1, group_size=4, lr=0.1, population=True)


def test_a_value_the_methods_label_overrides_is_refused():
    """fkl sets divergence to forward_kl: another --divergence would change nothing there, so it is refused; js takes
    it, and fkl accepts its own value."""
    cfg = TrainConfig(steps=1, group_size=4, lr=0.1, divergence="js")
    with pytest.raises(ValueError, match="^--divergence 'js' has no effect with --methods fkl, which sets divergence "
                                         "to 'forward_kl'$"):
        toy_method_args(BANDIT, Method.parse("fkl"), cfg)
    forward = TrainConfig(steps=1, group_size=4, lr=0.1, divergence="forward_kl")
    assert toy_method_args(BANDIT, Method.parse("js"), forward).divergence == "forward_kl"
    assert toy_method_args(BANDIT, Method.parse("fkl"), forward).divergence == "forward_kl"


def test_maxent_warn_steps_is_honoured_on_the_toy(caplog):
    """The toy drives MaxEnt's own method object at every optimizer step, so its far-below-target warning comes after
    maxent_warn_steps steps (0: never), as on the LLM trainer."""
    def warned(warn_steps: int) -> list[str]:
        caplog.clear()
        train(BANDIT, "maxent", TrainConfig(steps=2, group_size=4, lr=0.1, maxent_entropy_target=5.0,
                                            maxent_warn_steps=warn_steps), [0])
        return [r.getMessage() for r in caplog.records if "far below its target" in r.getMessage()]

    assert len(warned(1)) == 1 and "for 1 steps" in warned(1)[0]
    assert warned(2) and warned(0) == [] and warned(3) == []


def test_ips_converges_to_reward_proportional_and_grpo_collapses():
    cfg = TrainConfig(steps=300, group_size=64, lr=0.02)
    seeds = [42, 142, 242]
    final = {m: train(BANDIT, m, cfg, seeds).curves for m in ("grpo", "ips")}
    ips_l1 = final["ips"]["l1_to_target"][:, -10:].mean(1)
    assert (ips_l1 < 0.06).all(), ips_l1
    assert (final["grpo"]["max_outcome_prob"][:, -10:].mean(1) > 0.95).all()
    assert (final["grpo"]["l1_to_target"][:, -10:].mean(1) > 1.0).all()
    exact = train(BANDIT, "ips", TrainConfig(steps=300, group_size=64, lr=0.02, ips_exact=True), seeds)
    assert (exact.curves["l1_to_target"][:, -10:].mean(1) < 0.01).all()
    assert np.allclose(exact.final_distribution, [0.1, 0.2, 0.3, 0.4], atol=0.01)


@pytest.mark.parametrize("method", ["pop+ips+qd", "maxent+fkl"])
def test_runs_are_deterministic_per_seed(method):
    env = make_hypergrid(dim=2, side=5)
    cfg = TrainConfig(steps=12, group_size=8, lr=0.05, population_size=3, population_interval=4, population_top_m=2)
    first, second = train(env, method, cfg, [7, 8]), train(env, method, cfg, [7, 8])
    for name in TABULAR_METRICS:
        assert np.array_equal(first.curves[name], second.curves[name])
    # A seed's run does not depend on which other seeds share the batch.
    alone = train(env, method, cfg, [8])
    assert np.allclose(alone.curves["l1_to_target"][0], first.curves["l1_to_target"][1], atol=1e-6)
    assert not np.allclose(first.curves["l1_to_target"][0], first.curves["l1_to_target"][1])


def test_ideas_run_all_components_deterministically():
    first = train(IdeaEnv(), "pop+ips+qd+maxent", IDEAS_CFG, [3, 4])
    second = train(IdeaEnv(), "pop+ips+qd+maxent", IDEAS_CFG, [3, 4])
    for name in IDEA_METRICS:
        assert first.curves[name].shape == (2, 4) and np.isfinite(first.curves[name]).all()
        assert np.array_equal(first.curves[name], second.curves[name])
    # window (all 4 steps here) x seeds x members x prompts x G
    assert first.complexity_early.shape == first.complexity_late.shape == (4 * 2 * 3 * 8 * 4,)


def test_population_step_restarts_members_from_the_soup():
    cfg = TrainConfig(steps=1, group_size=4, lr=3e-4, population_size=4, population_top_m=2, population_sigma=0.0)
    trainer = Trainer(IdeaEnv(), Method.parse("pop"), cfg, [0, 1])
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    rollout, rewards, _ = trainer.step(0)
    trainer.population_step(rollout, rewards)
    for seed in range(2):
        block = trainer.params["w3"][seed * 4 : (seed + 1) * 4]
        assert torch.equal(block, block[:1].expand_as(block))  # sigma = 0: every member is the soup
    assert not torch.equal(trainer.params["w3"][0], trainer.params["w3"][4])  # seeds stay separate
    assert not torch.equal(trainer.params["w3"][0], before["w3"][0])
    # The restart noise is relative (the same divrl.core.perturb_relative_ as the LoRA trainer): every member's
    # copy of every tensor ends at exactly population_sigma x the soup tensor's norm from the soup.
    noisy = Trainer(IdeaEnv(), Method.parse("pop"), TrainConfig(steps=1, group_size=4, lr=3e-4, population_size=4,
                                                                population_top_m=2, population_sigma=0.2), [0])
    rollout, rewards, _ = noisy.step(0)
    top = select_top(selection_scores(torch.tensor([mean_pairwise_cosine_distance(rollout.outcomes[m])
                                                    for m in range(4)]), rewards.max(dim=1).values), 2)
    soup = {n: p.detach()[top].mean(0) for n, p in noisy.params.items()}
    noisy.population_step(rollout, rewards)
    for name, param in noisy.params.items():
        for member in range(4):
            distance = float((param.detach()[member] - soup[name]).norm() / soup[name].norm())
            assert distance == pytest.approx(0.2, rel=1e-4), (name, member)
    assert not torch.equal(noisy.params["w3"][0], noisy.params["w3"][1])


def fixed_rollout(outcomes: list[int]) -> Rollout:
    """A one-member bandit batch with the given arms."""
    arms = torch.tensor([outcomes])
    return Rollout(actions=arms[..., None], states=torch.zeros_like(arms)[..., None],
                   mask=torch.ones(1, len(outcomes), 1, dtype=torch.bool), outcomes=arms)


def test_qd_bonus_rewards_new_cells_once():
    trainer = Trainer(BANDIT, Method.parse("qd"), TrainConfig(steps=1, group_size=4, lr=0.1), [0])
    rollout = fixed_rollout([0, 0, 1, 3])
    rewards = BANDIT.outcome_rewards[rollout.outcomes]
    shaped = trainer.shaped_rewards(rollout, rewards, None)
    assert torch.allclose(shaped, torch.tensor([[1.5, 1.0, 2.5, 4.5]]))  # new cells: +0.5 for one item each
    again = trainer.shaped_rewards(rollout, rewards + torch.tensor([[0.0, 1.0, 0.0, 0.0]]), None)
    assert torch.allclose(again, torch.tensor([[1.0, 2.3, 2.0, 4.0]]))  # arm 0 improved by the second item: +0.3


def test_count_bonus_pays_rare_outcomes_across_steps():
    trainer = Trainer(BANDIT, Method.parse("count"), TrainConfig(steps=1, group_size=4, lr=0.1, count_bonus_coef=1.0),
                      [0])
    rollout = fixed_rollout([0, 0, 1, 3])
    rewards = BANDIT.outcome_rewards[rollout.outcomes]
    shaped = trainer.shaped_rewards(rollout, rewards, None)
    assert torch.allclose(shaped, rewards + torch.tensor([[3**-0.5, 3**-0.5, 2**-0.5, 2**-0.5]]))
    again = trainer.shaped_rewards(fixed_rollout([1, 2, 2, 2]), BANDIT.outcome_rewards[torch.tensor([[1, 2, 2, 2]])],
                                   None)
    assert torch.allclose(again, torch.tensor([[2 + 3**-0.5, 3.5, 3.5, 3.5]]))  # arm 1 seen twice, arm 2 three times


def test_unlikely_scales_rewards_by_the_samples_likelihood_rank():
    env = make_bandit([1, 1, 1, 1], initial_logits=[3.0, 2.0, 1.0, 0.0])
    trainer = Trainer(env, Method.parse("unlikely"),
                      TrainConfig(steps=1, group_size=4, lr=0.1, unlikeliness_beta=0.5), [0])
    rollout = fixed_rollout([2, 0, 3, 1])  # ranks by log-prob: arm 3 least likely (0) ... arm 0 likeliest (3)
    shaped = trainer.shaped_rewards(rollout, torch.ones(1, 4), None)
    assert shaped.tolist() == [[0.875, 0.625, 1.0, 0.75]]


def test_unlikely_spreads_an_equal_reward_bandit_over_every_rewarded_arm():
    # "Rewarding the Unlikely": GRPO gets no signal from equal rewards and keeps its skewed start; the rank
    # factor pays the rarer arms more until all rewarded arms are equally likely (arm 4 pays nothing).
    env = make_bandit([1, 1, 1, 0], initial_logits=[2.0, 0.0, -1.0, 0.0])
    cfg = TrainConfig(steps=300, group_size=16, lr=0.05)
    final = {m: train(env, m, cfg, [0, 1]).curves for m in ("grpo", "unlikely")}
    assert final["grpo"]["max_outcome_prob"][:, -10:].mean() > 0.8
    assert final["unlikely"]["l1_to_target"][:, -10:].mean() < 0.1


def test_fp32_residue_of_a_shared_reward_sharpens_grpo_unless_flat_groups_get_zero():
    # Every arm pays 1.2: no group carries signal, but fp32 normalisation gives each sampled arm advantage ~+1e-3,
    # and Adam turns that into a steady push toward the arms sampled most (1.0 is exact in fp32: no drift).
    start = [1.0, 0.0, 0.0, 0.0]
    modal = {}
    for reward, zero in ((1.0, False), (1.2, False), (1.2, True)):
        env = make_bandit([reward] * 4, initial_logits=start)
        cfg = TrainConfig(steps=300, group_size=8, lr=0.05, zero_flat_groups=zero)
        curves = train(env, "grpo", cfg, [0, 1]).curves  # two seeds: the drift's size varies with the draws
        modal[reward, zero] = (curves["max_outcome_prob"][:, 0].mean().item(),
                               curves["max_outcome_prob"][:, -1].mean().item())
    assert modal[1.0, False][1] == modal[1.0, False][0]
    assert modal[1.2, False][1] > modal[1.2, False][0] + 0.1
    assert modal[1.2, True][1] == modal[1.2, True][0]


def test_passk_advantages_and_pass_at_k_metric():
    trainer = Trainer(BANDIT, Method.parse("passk"), TrainConfig(steps=1, group_size=4, lr=0.1, passk=2), [0])
    shaped = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    from divrl.core import passk_advantages

    assert torch.allclose(trainer.advantages(fixed_rollout([0, 1, 2, 3]), shaped),
                          passk_advantages(shaped.flatten(), 4, 2).view(1, 4))
    with pytest.raises(ValueError, match=r"--passk must be 0 \(off\) or >= 2 and below --group-size \(4"):
        Trainer(BANDIT, Method.parse("passk"), TrainConfig(steps=1, group_size=4, lr=0.1, passk=4), [0])
    run = train(BANDIT, "grpo", TrainConfig(steps=1, group_size=4, lr=1e-9, passk=3), [0])
    assert run.curves["pass_at_k"][0, 0] == pytest.approx(1 - 0.75**3)  # uniform start: p(best arm) = 1/4


def test_cov_components_pick_tokens_by_covariance_and_klcov_needs_a_reused_batch():
    with pytest.raises(ValueError, match="^cov_method 'kl_cov' penalises .* set --updates > 1"):  # no flag: the label
        Trainer(BANDIT, Method.parse("kl-cov"), TrainConfig(steps=1, group_size=4, lr=0.1), [0])
    trainer = Trainer(BANDIT, Method.parse("kl-cov"), TrainConfig(steps=1, group_size=4, lr=0.1, updates_per_batch=2,
                                                               cov_ratio=0.25), [0])
    rollout = fixed_rollout([0, 1, 2, 3])
    logp = trainer.policy.evaluate(trainer.params, rollout)[0].detach() + torch.tensor([0.0, 0.0, 0.0, 1.0])[:, None]
    advantages = torch.tensor([[-1.0, -0.5, 0.5, 1.0]])
    picked = trainer.member_methods[0]["cov"].select(logp[0], advantages[0], rollout.mask[0])  # what update runs
    assert picked.squeeze(-1).tolist() == [False, False, False, True]  # the likeliest sample with A > 0
    run = train(BANDIT, "clip-cov", TrainConfig(steps=3, group_size=8, lr=0.05, cov_ratio=0.5), [0])
    assert np.isfinite(run.curves["l1_to_target"]).all()


def test_clip_cov_draws_a_seeds_tokens_with_that_seeds_generator():
    # Clip-Cov's method object draws its tokens at random; with torch's global generator (the LLM trainer's) a seed's
    # draws would depend on the seeds drawn before it in the batch.
    env = make_hypergrid(dim=2, side=5)
    cfg = TrainConfig(steps=12, group_size=8, lr=0.05, cov_ratio=0.3, cov_clip_bounds=[-1.0, 1.0])
    pair, alone = train(env, "clip-cov", cfg, [7, 8]), train(env, "clip-cov", cfg, [8])
    assert np.allclose(alone.curves["l1_to_target"][0], pair.curves["l1_to_target"][1], atol=1e-6)
    grpo = train(env, "grpo", cfg, [8])
    assert not np.allclose(alone.curves["l1_to_target"][0], grpo.curves["l1_to_target"][0])  # it detaches tokens


def test_clip_higher_acts_only_on_a_reused_batch_and_top_entropy_keeps_the_top_tokens():
    # On a batch's first update the ratio is 1, so the upper clip cannot bind: clip-higher equals GRPO there.
    def final(method: str, updates: int) -> np.ndarray:
        cfg = TrainConfig(steps=20, group_size=8, lr=0.5, updates_per_batch=updates)
        return train(BANDIT, method, cfg, [0]).final_distribution

    assert np.array_equal(final("clip-higher", 1), final("grpo", 1))
    assert not np.allclose(final("clip-higher", 4), final("grpo", 4))
    trainer = Trainer(BANDIT, Method.parse("top-entropy"), TrainConfig(steps=1, group_size=5, lr=0.1,
                                                                        top_entropy_quantile=0.4), [0])
    entropy = torch.tensor([[[0.1], [0.5], [0.3], [0.9], [0.7]]])
    mask = torch.tensor([[[1.0], [1.0], [1.0], [1.0], [0.0]]])  # the last token is padding: not counted
    assert trainer._high_entropy_tokens(entropy, mask).squeeze(-1).tolist() == [[0.0, 1.0, 0.0, 1.0, 1.0]]
    run = train(make_hypergrid(), "top-entropy", TrainConfig(steps=3, group_size=8, lr=0.05), [0])
    assert np.isfinite(run.curves["l1_to_target"]).all()


def test_ips_scaling_group_and_exact():
    rollout = fixed_rollout([0, 0, 1, 3])
    rewards = BANDIT.outcome_rewards[rollout.outcomes]
    group = Trainer(BANDIT, Method.parse("ips"), TrainConfig(steps=1, group_size=4, lr=0.1), [0])
    assert group.shaped_rewards(rollout, rewards, None).tolist() == [[2.0, 2.0, 8.0, 16.0]]
    exact = Trainer(BANDIT, Method.parse("ips"), TrainConfig(steps=1, group_size=4, lr=0.1, ips_exact=True), [0])
    dist = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    assert exact.shaped_rewards(rollout, rewards, dist).tolist() == [[2.0, 2.0, 8.0, 32.0]]


def test_maxent_and_divergences_keep_the_bandit_spread_out():
    # JS is bounded by log 2, so its pull toward the initial policy is weaker than forward KL's: a strong
    # coefficient lets both show their effect within 200 steps.
    cfg = TrainConfig(steps=200, group_size=16, lr=0.05, maxent_entropy_target=1.3, maxent_alpha_lr=0.5,
                      divergence_coef=10.0)
    peak = {m: train(BANDIT, m, cfg, [1, 2]).curves["max_outcome_prob"][:, -10:].mean() for m in
            ("grpo", "maxent", "fkl", "js")}
    assert peak["grpo"] > 0.9
    for method in ("maxent", "fkl", "js"):
        assert peak[method] < 0.6, (method, peak[method])


def test_multiplicity_ips_balances_outcomes_where_grpo_follows_path_counts():
    env = make_multiplicity_grid()
    cfg = TrainConfig(steps=400, group_size=32, lr=0.05)
    freqs = {m: train(env, m, cfg, [5]).curves["outcome_freqs"][0, -10:].mean(0) for m in ("grpo", "ips")}
    assert freqs["grpo"][0] > 0.9 and freqs["grpo"][1] < 0.05
    assert 0.35 < freqs["ips"][1] / freqs["ips"].sum() < 0.65


def idea_rollout(ideas: torch.Tensor) -> Rollout:
    """A one-member ideas batch (1, N, dim), all from prompt 0."""
    return Rollout(actions=ideas, states=torch.zeros(ideas.shape[1], dtype=torch.long),
                   mask=torch.ones(ideas.shape, dtype=torch.bool), outcomes=ideas)


def test_ideas_ips_counts_outcomes_by_the_chosen_key():
    env = IdeaEnv()
    near = env.centres[[0, 0, 0, 5]] + 0.01 * torch.arange(4.0)[:, None]  # three ideas on peak 0, one on peak 5
    rollout = idea_rollout(near[None])
    rewards = torch.ones(1, 4)
    cfg = TrainConfig(steps=1, group_size=4, lr=0.1)
    trainer = Trainer(env, Method.parse("ips"), cfg, [0])
    assert trainer.outcome_keys(rollout).tolist() == [[0, 0, 0, 5]]
    assert torch.allclose(trainer.shaped_rewards(rollout, rewards, None), torch.tensor([[4 / 3, 4 / 3, 4 / 3, 4.0]]))
    by_cell = Trainer(env, Method.parse("ips"), TrainConfig(steps=1, group_size=4, lr=0.1, ips_outcome="cell"), [0])
    cells = env.outcome_key(near, "cell")
    expected = torch.tensor([4.0 / int((cells == c).sum()) for c in cells])
    assert torch.allclose(by_cell.shaped_rewards(rollout, rewards, None), expected[None])
    # semantic: classes by cosine of the idea vectors, learned without the landscape, kept across steps
    semantic = Trainer(env, Method.parse("ips"), TrainConfig(steps=1, group_size=4, lr=0.1, ips_outcome="semantic"),
                       [0])
    assert semantic.outcome_keys(rollout).tolist() == [[0, 0, 0, 1]]
    assert torch.allclose(semantic.shaped_rewards(rollout, rewards, None), torch.tensor([[4 / 3, 4 / 3, 4 / 3, 4.0]]))
    later = idea_rollout(env.centres[[5, 0, 2, 2]][None])
    assert semantic.outcome_keys(later).tolist() == [[1, 0, 2, 2]]


def test_ideas_log_distinct_outcomes_per_group():
    runs = {kind: train(IdeaEnv(), "grpo", TrainConfig(steps=2, group_size=16, lr=3e-4, ips_outcome=kind), [0])
            for kind in ("peak", "grid4", "cell")}
    per_group = {kind: run.curves["outcomes_per_group"] for kind, run in runs.items()}
    assert all(((v >= 1) & (v <= 16)).all() for v in per_group.values())
    # The same ideas (grpo ignores the key) counted by ever finer keys: <= 8 peaks, then 16, then 100 cells.
    assert (per_group["peak"] <= 8).all()
    assert (per_group["peak"] < per_group["cell"]).all() and (per_group["grid4"] < per_group["cell"]).all()


def test_entropy_alpha_is_recorded_and_moves_only_below_target():
    cfg = TrainConfig(steps=3, group_size=4, lr=3e-4)  # target 1.0: below the initial per-coordinate entropy
    maxent = train(IdeaEnv(), "maxent", cfg, [0, 1])
    assert (maxent.curves["token_entropy"] > maxent.settings["maxent_entropy_target"]).all()
    assert (maxent.curves["entropy_alpha"] == 0).all()
    high = TrainConfig(steps=3, group_size=4, lr=3e-4, maxent_entropy_target=3.0)
    run = train(IdeaEnv(), "maxent", high, [0, 1])
    curves, settings = run.curves, run.settings
    assert (np.diff(curves["entropy_alpha"], axis=1) > 0).all()  # entropy below target: alpha grows every step
    alpha_after_one = settings["maxent_alpha_lr"] * (settings["maxent_entropy_target"] - curves["token_entropy"][:, 0])
    assert np.allclose(curves["entropy_alpha"][:, 0], alpha_after_one, atol=1e-6)
    assert (train(IdeaEnv(), "grpo", high, [0]).curves["entropy_alpha"] == 0).all()  # no controller without maxent


def test_seed_std_is_the_sample_std_used_by_plots_and_metrics_json():
    from divrl.toy.report import seed_std, summarise

    per_seed = np.array([[1.0, 2.0], [3.0, 2.0]])
    assert np.allclose(seed_std(per_seed), [2**0.5, 0.0])  # ddof = 1, not numpy's default ddof = 0
    assert np.array_equal(seed_std(per_seed[:1]), [0.0, 0.0])
    run = train(BANDIT, "grpo", TrainConfig(steps=3, group_size=4, lr=0.1), [1, 2, 3])
    l1 = run.curves["l1_to_target"]
    assert summarise(run)["final"]["l1_to_target"]["std"] == pytest.approx(float(seed_std(l1.mean(1))))


def _warm_multiplicity():
    """The 7-step grid warm-started on outcome B's path (per-token entropy 0.15; at most log 2 is reachable)."""
    env = make_multiplicity_grid()
    cells = [(x, d - x) for d in range(7) for x in range(d + 1)]
    logits = torch.zeros_like(env.initial_logits)
    logits[torch.arange(len(cells)), torch.tensor([0 if x < 6 else 1 for x, _ in cells])] = 3.3
    return dataclasses.replace(env, initial_logits=logits)


def test_auto_entropy_target_holds_a_low_entropy_start_with_a_bounded_coefficient():
    env, seeds = _warm_multiplicity(), [0, 1]
    base = {"steps": 300, "group_size": 32, "lr": 0.05}
    paper = train(env, "maxent", TrainConfig(**base, maxent_entropy_target=1.0), seeds).curves
    assert (np.diff(paper["entropy_alpha"], axis=1) > 0).all()  # H* = 1.0 is out of reach: alpha rises every step
    assert (paper["entropy_alpha"][:, -1] > 1.0).all()
    for controller in ("dual", "trl"):
        curves = train(env, "maxent", TrainConfig(**base, maxent_entropy_target="auto", entropy_controller=controller),
                       seeds).curves
        target = curves["token_entropy"][:, 0]  # auto: the first step's entropy
        assert (curves["entropy_alpha"][:, 0] == 0).all()  # no bonus while measuring
        assert (curves["token_entropy"][:, -10:].mean(1) >= 0.8 * target).all(), controller  # held
        assert (curves["entropy_alpha"].max(1) < 0.5).all(), controller  # bounded, far below the paper's


def test_toy_default_entropy_controller_matches_the_llm_trainer():
    # As DivRLTrainer: 'auto' runs TRL's rule, a number dual descent.
    env, seeds = _warm_multiplicity(), [0]
    base = {"steps": 30, "group_size": 16, "lr": 0.05}
    for target, rule in (("auto", "trl"), (1.0, "dual")):
        default, explicit = (train(env, "maxent", TrainConfig(**base, maxent_entropy_target=target, **extra),
                                   seeds).curves for extra in ({}, {"entropy_controller": rule}))
        assert all(np.array_equal(default[k], explicit[k]) for k in ("token_entropy", "entropy_alpha")), target
    assert TrainConfig(**base).entropy_controller == "default"


def test_trl_entropy_mirror_follows_trl_rule_with_grpo_config_defaults():
    from trl import GRPOConfig

    from divrl.methods import EntropyBonus
    from divrl.toy import trl_entropy

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert (trl_entropy.TRL_ENTROPY_COEF_DELTA, trl_entropy.TRL_ENTROPY_COEF_MIN,
            trl_entropy.TRL_ENTROPY_COEF_MAX) == tuple(defaults[k] for k in (
                "entropy_coef_delta", "entropy_coef_min", "entropy_coef_max"))
    bonus = EntropyBonus(coef=0.0, adaptive=True, target=0.5)
    assert trl_entropy.applied_coefficient(bonus) == 0.0  # no measurement yet: TRL applies nothing
    applied = []
    for h in (0.1, 0.2, 0.9, 0.3, 0.1, 0.1):
        trl_entropy.adaptive_step(bonus, h, delta=0.4, max_coef=1.0)
        applied.append(trl_entropy.applied_coefficient(bonus))
    # coef: 0.4, 0.8, 0.4 (above target), 0.8, 1.0 (capped), 1.0; applied only after a step at or below target
    assert applied == pytest.approx([0.4, 0.8, 0.0, 0.8, 1.0, 1.0])
    fixed = EntropyBonus(coef=0.3)  # dual descent's coefficient: applied as set, never stepped by TRL's rule
    trl_entropy.adaptive_step(fixed, 0.0)
    assert trl_entropy.applied_coefficient(fixed) == 0.3


def test_a_reward_method_registered_in_one_file_runs_on_the_toy() -> None:
    """docs/add-a-method.md: the method file's registration alone makes it a toy component (its name, '_' as '-'),
    at its preset, with its fields as TrainConfig options checked by its own `validate`."""
    from dataclasses import dataclass, field
    from typing import Any

    from divrl.methods import REGISTRY, RewardStep, Stage, register
    from divrl.methods import Method as DivRLMethod

    @dataclass
    class RewardedBonusConfig:
        rewarded_bonus: float = field(default=0.0, metadata={"help": "Bonus for a rewarded sample. Default 0.0."})

    @register
    class RewardedBonus(DivRLMethod):
        """REWARD: the bonus column gains `rewarded_bonus` for each sample the task rewards."""

        name = "rewarded_bonus"
        switch = "rewarded_bonus"
        stage = Stage.REWARD
        order = 60
        Config = RewardedBonusConfig
        preset = {"rewarded_bonus": 0.5}  # noqa: RUF012
        bonus = True

        @classmethod
        def enabled(cls, args: Any) -> bool:
            return args.rewarded_bonus > 0

        @classmethod
        def validate(cls, args: Any) -> None:
            if args.rewarded_bonus < 0:
                raise ValueError(f"DivRLConfig.rewarded_bonus must be >= 0, got {args.rewarded_bonus}")

        def shape_rewards(self, step: RewardStep) -> None:
            step.bonus += self.args.rewarded_bonus * (step.primary > 0)

    try:
        env = make_bandit([0, 1, 2, 3])
        rollout = fixed_rollout([0, 1, 2, 3])
        rewards = env.outcome_rewards[rollout.outcomes]
        preset = Trainer(env, Method.parse("ips+rewarded-bonus"), TrainConfig(steps=1, group_size=4, lr=0.1), [0])
        assert preset.shaped_rewards(rollout, rewards, None).tolist() == [[0.0, 4.5, 8.5, 12.5]]  # after IPS
        cfg = TrainConfig(steps=2, group_size=4, lr=0.1, rewarded_bonus=2.0)
        assert Trainer(env, Method.parse("rewarded-bonus"), cfg, [0]).shaped_rewards(
            rollout, rewards, None).tolist() == [[0.0, 3.0, 4.0, 5.0]]
        assert Trainer(env, Method.parse("grpo"), cfg, [0]).shaped_rewards(rollout, rewards, None).equal(rewards)
        assert np.isfinite(train(env, "rewarded-bonus", cfg, [0]).curves["l1_to_target"]).all()
        with pytest.raises(ValueError, match="--rewarded-bonus must be >= 0, got -1"):  # in the runs it is on in
            Trainer(env, Method.parse("rewarded-bonus"), TrainConfig(steps=1, group_size=4, lr=0.1,
                                                                     rewarded_bonus=-1.0), [0])
    finally:
        REGISTRY.pop(RewardedBonus.name)


def test_old_component_labels_are_aliases_that_warn_once(capsys) -> None:
    import divrl.toy.methods

    divrl.toy.methods._warned.discard("cliphigher")
    assert Method.parse("cliphigher+ips").components == {"clip-higher", "ips"}
    assert "'cliphigher' is deprecated, use 'clip-higher'" in capsys.readouterr().err
    assert "cliphigher" in Method.parse("cliphigher") and "clip-higher" in Method.parse("clip-higher")
    assert capsys.readouterr().err == ""


def test_method_settings_come_from_the_registry() -> None:
    """A method field is the component's preset where it is on, the toy's documented value, or the field default."""
    from divrl.methods import presets_of
    from divrl.toy.options import TOY_METHOD_DEFAULTS

    cfg = TrainConfig(steps=1, group_size=8, lr=0.1)
    on = toy_method_args(BANDIT, Method.parse("count+passk+maxent"), cfg)
    assert (on.count_bonus_coef, on.passk) == (presets_of("count_bonus")["count_bonus_coef"],
                                               presets_of("passk")["passk"])
    assert on.maxent_entropy_target == TOY_METHOD_DEFAULTS["maxent_entropy_target"]
    off = toy_method_args(BANDIT, Method.parse("grpo"), cfg)
    assert (off.count_bonus_coef, off.passk, off.maxent_entropy_target) == (0.0, 0, None)
    with pytest.raises(ValueError, match="unknown option"):
        TrainConfig(steps=1, group_size=8, lr=0.1, temperature=1.0)
