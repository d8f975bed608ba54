"""CPU fast log-prob path: exact agreement with a naive log-softmax and with TRL's own GRPO path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from divrl.backends import cpu as cpu_fast
from divrl.backends.cpu import SampledTokenLogProb


def _naive(hidden, weight, targets, inv_t, softcap):
    logits = hidden @ weight.T
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    log_p = torch.log_softmax(logits * inv_t, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return log_p.gather(1, targets[:, None]).squeeze(1), entropy


@pytest.fixture
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiles of 3 rows for a 50-token vocabulary, so several tiles (and a short last one) are exercised."""
    monkeypatch.setattr(cpu_fast, "LOGITS_TILE_BYTES", 3 * 4 * 50)


@pytest.mark.usefixtures("small_tiles")
@pytest.mark.parametrize("softcap", [None, 3.0])
@pytest.mark.parametrize(
    ("entropy_weight", "entropy_needs_grad", "weight_grad"),
    [(0.0, False, False), (0.7, False, False), (0.7, True, False), (0.0, False, True), (0.7, True, True)],
)
def test_values_and_gradients_match_log_softmax(
    softcap: float | None, entropy_weight: float, entropy_needs_grad: bool, weight_grad: bool
) -> None:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(8, 16, dtype=torch.float64, generator=generator)
    weight = torch.randn(50, 16, dtype=torch.float64, generator=generator)
    targets = torch.randint(0, 50, (8,), generator=generator)
    upstream = torch.randn(8, dtype=torch.float64, generator=generator)
    inv_t = 1 / 0.7

    results = []
    for fast in (True, False):
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_(weight_grad)
        if fast:
            logps, entropy = SampledTokenLogProb.apply(h, w, targets, inv_t, softcap, True, entropy_needs_grad)
        else:
            logps, entropy = _naive(h, w, targets, inv_t, softcap)
        loss = (upstream * logps).sum() + entropy_weight * entropy.sum()
        loss.backward()
        results.append((logps.detach(), entropy.detach(), h.grad, w.grad))
    (fast_logps, fast_entropy, fast_h, fast_w), (ref_logps, ref_entropy, ref_h, ref_w) = results
    torch.testing.assert_close(fast_logps, ref_logps)
    torch.testing.assert_close(fast_entropy, ref_entropy)
    torch.testing.assert_close(fast_h, ref_h)
    if weight_grad:
        torch.testing.assert_close(fast_w, ref_w)
    else:
        assert fast_w is None


@pytest.mark.usefixtures("small_tiles")
def test_without_gradient_or_entropy_only_log_probs_are_returned() -> None:
    hidden, weight = torch.randn(7, 16), torch.randn(50, 16)
    targets = torch.randint(0, 50, (7,))
    logps, entropy = SampledTokenLogProb.apply(hidden, weight, targets, 1.0, None, False, False)
    assert entropy is None
    torch.testing.assert_close(logps, _naive(hidden, weight, targets, 1.0, None)[0])


def _trainer(model_dir: Path, tmp_path: Path, fast: bool, lora_dropout: float = 0.0, **config: object):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.models import default_lora_config

    # fast: divrl's trainer with every method off, which runs the CPU kernels; plain: TRL's own
    trainer_class, config_class = (DivRLTrainer, DivRLConfig) if fast else (GRPOTrainer, GRPOConfig)
    settings: dict = dict(
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        activation_checkpointing=False,
        bf16=False,
        use_cpu=True,
        report_to=[],
        seed=0,
    )
    args = config_class(output_dir=str(tmp_path / ("fast" if fast else "plain")), **{**settings, **config})
    torch.manual_seed(0)
    return trainer_class(
        model=str(model_dir),
        reward_funcs=lambda completions, **_: [float(len(set(c))) for c in completions],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "the answer is"}, {"prompt": "solve this problem"}] * 4),
        peft_config=default_lora_config(r=4, lora_dropout=lora_dropout),
    )


def _loss_and_grads(trainer, inputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train, which this test bypasses
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize(
    "config",
    [{}, {"entropy_coef": 0.05, "temperature": 0.7}, {"beta": 0.1}, {"activation_checkpointing": True}],
)
def test_grpo_loss_and_gradients_match_trl(
    tiny_gemma3: Path, tmp_path: Path, config: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same sampled batch: per-token log-probs, entropies, loss and LoRA gradients equal TRL's own path, with each
    group's prompt computed once (the rows share 2 prompts)."""
    shared = []
    share = cpu_fast.shared_prompt_hidden_states
    monkeypatch.setattr(cpu_fast, "shared_prompt_hidden_states", lambda *a: shared.append(share(*a)) or shared[-1])
    fast, plain = _trainer(tiny_gemma3, tmp_path, True, **config), _trainer(tiny_gemma3, tmp_path, False, **config)
    plain.model.load_state_dict(fast.model.state_dict())
    fast.model.train()
    plain.model.train()
    batch = next(iter(fast.get_train_dataloader()))
    inputs = fast._generate_and_score_completions(batch)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].shape[1]
    fast_logps, fast_entropy, _ = fast._get_per_token_logps_and_entropies(fast.model, ids, mask, keep, 2, True)
    plain_logps, plain_entropy, _ = plain._get_per_token_logps_and_entropies(plain.model, ids, mask, keep, 2, True)
    torch.testing.assert_close(fast_logps, plain_logps, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast_entropy, plain_entropy, rtol=1e-5, atol=1e-5)

    fast_loss, fast_grads = _loss_and_grads(fast, inputs)
    plain_loss, plain_grads = _loss_and_grads(plain, inputs)
    torch.testing.assert_close(fast_loss, plain_loss, rtol=1e-5, atol=1e-6)
    assert fast_grads.keys() == plain_grads.keys() and fast_grads
    for name, grad in fast_grads.items():
        torch.testing.assert_close(grad, plain_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert shared and all(hidden is not None for hidden in shared)  # the shared-prompt forward ran


def test_prompt_sharing_only_where_it_is_exact(tiny_gemma3: Path, tmp_path: Path) -> None:
    """Active dropout (one mask per row) and activation checkpointing (a second cache update) use the full forward."""
    trainer = _trainer(tiny_gemma3, tmp_path, True)
    backbone = trainer._causal_lm(trainer.model).base_model
    backbone.train()
    assert cpu_fast._prompt_sharing_allowed(backbone)
    trainer._causal_lm(trainer.model).activation_checkpointing_enable()
    assert not cpu_fast._prompt_sharing_allowed(backbone)
    dropout = _trainer(tiny_gemma3, tmp_path / "dropout", True, lora_dropout=0.1)
    dropout.model.train()
    assert not cpu_fast._prompt_sharing_allowed(dropout._causal_lm(dropout.model).base_model)


def test_unsupported_settings_use_trls_path(tiny_qwen3: Path, tmp_path: Path) -> None:
    """Mixed precision is left to TRL's fused head (the fast path is float32-only)."""
    trainer = _trainer(tiny_qwen3, tmp_path, True, max_steps=1)
    assert trainer._fast_logps_model(trainer.model) is not None
    trainer.args.bf16 = True
    assert trainer._fast_logps_model(trainer.model) is None


def test_decode_head_gives_the_same_logits_and_greedy_tokens(tiny_gemma3: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_gemma3, dtype=torch.float32)
    head = model.get_output_embeddings()
    inputs = torch.randint(0, model.config.vocab_size, (3, 5))
    plain_hidden = torch.randn(2, cpu_fast.DECODE_HEAD_MAX_ROWS + 1, head.weight.shape[1])
    with torch.no_grad():
        before_logits = model(inputs).logits
        before_tokens = model.generate(inputs, max_new_tokens=6, do_sample=False)
        cpu_fast.add_decode_lm_head(model)
        cpu_fast.add_decode_lm_head(model)  # idempotent
        torch.testing.assert_close(model(inputs).logits, before_logits)
        assert torch.equal(model.generate(inputs, max_new_tokens=6, do_sample=False), before_tokens)
        torch.testing.assert_close(head(plain_hidden), plain_hidden @ head.weight.T)  # many rows: plain path


def test_sample_categorical_follows_the_distribution_and_skips_zero_probabilities() -> None:
    torch.manual_seed(0)
    probs = torch.tensor(
        [[0.0, 0.5, 0.0, 0.2, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
    )
    draws = 40_000
    tokens = cpu_fast.sample_categorical(probs.repeat_interleave(draws, dim=0)).view(3, draws)
    counts = torch.stack([torch.bincount(row, minlength=6) for row in tokens]).double()
    expected = probs.double() * draws
    sigma = (draws * probs.double() * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs() <= 5 * sigma).all(), counts  # exact where p is 0 or 1
    assert (counts[probs == 0] == 0).all()


class _ScriptedTokens:
    """Logits processor making the next token a fixed function of the prefix (so any sampler must pick it);
    row 0 emits the EOS token after 3 new tokens, to exercise stopping and padding."""

    def __init__(self, prompt_length: int, eos: int, vocab: int) -> None:
        self.prompt_length, self.eos, self.vocab = prompt_length, eos, vocab

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        chosen = (input_ids.sum(dim=1) * 7 + input_ids.shape[1]) % (self.vocab - 1)
        chosen = torch.where(chosen >= self.eos, chosen + 1, chosen)  # never EOS by accident
        if input_ids.shape[1] - self.prompt_length == 3:
            chosen[0] = self.eos
        return torch.full_like(scores, -float("inf")).scatter_(1, chosen[:, None], 0.0)


def test_cpu_sampler_generates_what_transformers_generates(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM, LogitsProcessorList

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    eos = model.generation_config.eos_token_id
    torch.manual_seed(0)
    prompts = torch.randint(0, model.config.vocab_size, (3, 4))
    processor = LogitsProcessorList([_ScriptedTokens(prompts.shape[1], eos, model.config.vocab_size)])
    settings = dict(max_new_tokens=7, do_sample=True, top_k=0, logits_processor=processor)
    expected = model.generate(prompts, **settings)
    cpu_fast.add_decode_sampler(model)
    cpu_fast.add_decode_sampler(model)  # idempotent
    produced = model.generate(prompts, **settings)
    assert torch.equal(produced, expected)
    start, pad = prompts.shape[1], model.generation_config.pad_token_id
    assert produced.shape[1] == start + 7 and produced[0, start + 3] == eos and (produced[0, start + 4 :] == pad).all()


def test_cpu_sampler_reports_the_log_probs_of_the_tokens_it_drew(tiny_qwen3: Path) -> None:
    from trainer_helpers import completion_logps
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    torch.manual_seed(0)
    prompts = torch.randint(0, model.config.vocab_size, (3, 4))
    recorded: list[torch.Tensor] = []
    cpu_fast.add_decode_sampler(model, recorded.append)
    produced = model.generate(prompts, max_new_tokens=6, do_sample=True, top_k=0, temperature=0.7,
                              eos_token_id=None)
    assert len(recorded) == 1 and recorded[0].shape == (3, 6)
    expected = completion_logps(model, produced, torch.ones_like(produced), 6, temperature=0.7)
    torch.testing.assert_close(recorded[0], expected, atol=1e-4, rtol=1e-4)
    model.generate(prompts, max_new_tokens=2, do_sample=False)  # greedy decoding is transformers' own: no record
    assert len(recorded) == 1
