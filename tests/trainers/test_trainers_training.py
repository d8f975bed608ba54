"""Real LoRA training steps for every divrl trainer and one composition, on tiny Qwen3 and Gemma3 models."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import ToyTask, lora_config, make_config, metric_keys, prompt_dataset, snapshot

PRESETS = {
    "IPSGRPOTrainer": ({}, {"ips/distinct_outcomes", "ips/max_scale"}),
    "QDGRPOTrainer": ({}, {"qd/coverage", "qd/qd_score", "qd/new_cells"}),
    "MaxEntGRPOTrainer": (
        {"maxent_entropy_target": 8.0, "novelty_embedding": "hidden"},
        {"maxent/alpha", "maxent/novelty", "entropy_coef"},
    ),
    "DivergenceGRPOTrainer": ({}, {"divergence/js"}),
    "UnlikelinessGRPOTrainer": ({}, set()),
    "PassAtKGRPOTrainer": ({"passk": 2}, set()),  # the preset's k = 4 needs groups of more than 4
    "DivRLTrainer": (
        {"ips": True, "qd": True, "novelty_coef": 0.3, "novelty_embedding": "task", "length_bins": 2,
         "divergence": "forward_kl"},
        {"ips/max_scale", "qd/coverage", "maxent/novelty", "divergence/forward_kl", "rewards/divrl_bonus/mean"},
    ),
}


@pytest.mark.parametrize("trainer_name", list(PRESETS))
def test_lora_training_changes_only_the_adapter(trainer_name: str, tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    import divrl

    overrides, expected_metrics = PRESETS[trainer_name]
    trainer_class = getattr(divrl, trainer_name)
    trainer = trainer_class(
        str(tiny_model), args=make_config(tmp_path, **overrides), train_dataset=prompt_dataset(conversational=True),
        processing_class=AutoTokenizer.from_pretrained(tiny_model), peft_config=lora_config(), task=ToyTask(),
    )
    before = snapshot(trainer.model)
    trainer.train()
    after = snapshot(trainer.model)

    base = [n for n in before if "lora_" not in n]
    lora_b = [n for n in before if "lora_B" in n]
    assert base and lora_b
    assert all(before[n].equal(after[n]) for n in base), "base weights must stay frozen"
    assert all(not before[n].equal(after[n]) for n in lora_b), "every lora_B must train"
    assert trainer.state.global_step == 2
    missing = expected_metrics - metric_keys(trainer.state.log_history)
    assert not missing, f"metrics not logged: {missing}"


def test_divergence_without_peft_loads_a_frozen_reference(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from divrl import DivergenceGRPOTrainer

    trainer = DivergenceGRPOTrainer(
        str(tiny_qwen3), args=make_config(tmp_path, divergence="reverse_kl", beta=0.0),
        train_dataset=prompt_dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_qwen3),
        task=ToyTask(),
    )
    reference_before = snapshot(trainer.ref_model)
    policy_before = snapshot(trainer.model)
    trainer.train()
    assert all(p.equal(reference_before[n]) for n, p in trainer.ref_model.named_parameters())
    assert any(not p.equal(policy_before[n]) for n, p in trainer.model.named_parameters())
    values = [h["divergence/reverse_kl"] for h in trainer.state.log_history if "divergence/reverse_kl" in h]
    assert values[0] == pytest.approx(0.0, abs=1e-6)  # step 1: policy == reference
    assert values[1] > 0  # after one update the policy has moved


def test_reference_of_an_in_memory_model_is_that_model_not_its_path(tiny_qwen3: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from divrl import DivergenceGRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    with torch.no_grad():  # the object now differs from the checkpoint at its _name_or_path
        for parameter in model.parameters():
            parameter.add_(0.01)
    initial = snapshot(model)
    trainer = DivergenceGRPOTrainer(
        model, args=make_config(tmp_path, divergence="forward_kl", beta=0.0),
        train_dataset=prompt_dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_qwen3), task=ToyTask(),
    )
    reference = dict(trainer.ref_model.named_parameters())
    assert set(reference) == set(initial)
    assert all(reference[n].equal(initial[n]) for n in initial)
    assert trainer.ref_model is not trainer.model


def test_hidden_state_embedding_is_the_pooled_last_layer(tiny_gemma3: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer

    trainer = DivRLTrainer(str(tiny_gemma3), args=make_config(tmp_path, novelty_coef=0.3, novelty_embedding="hidden"),
                           train_dataset=prompt_dataset(), processing_class=AutoTokenizer.from_pretrained(tiny_gemma3),
                           peft_config=lora_config(), task=ToyTask())
    trainer.model.eval()
    completions = [[5, 6, 7], [8, 9]]
    embeddings = trainer._pooled_hidden_states(completions)
    assert embeddings.shape == (2, trainer.model.config.hidden_size)
    for row, ids in zip(embeddings, completions, strict=True):
        with torch.no_grad():
            hidden = trainer.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
        torch.testing.assert_close(row, torch.nn.functional.normalize(hidden.mean(0), dim=0), atol=1e-5, rtol=1e-4)
