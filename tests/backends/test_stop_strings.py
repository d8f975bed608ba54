"""Completions end at a stop string: generation stops there, later tokens never reach the loss or the rewards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import lora_config, make_config, prompt_dataset, randomize_lora

from divrl.backends import cpu as cpu_fast
from divrl.backends.stop_strings import StopStringCriterion, stop_length, vllm_stop_kwargs

STOP = "\nEND"


def test_stop_length_is_the_shortest_prefix_containing_a_stop() -> None:
    decode = "".join
    assert stop_length(list("ab\nEND\nxy"), decode, [STOP]) == 6
    assert stop_length(list("ab\nEN"), decode, [STOP]) is None
    assert stop_length(list("xSTOPab\nEND"), decode, [STOP, "STOP"]) == 5  # the first of several stops
    assert stop_length(list("\nEND"), decode, [STOP]) == 4
    assert stop_length([], decode, [STOP]) is None
    assert stop_length(list("ab"), decode, []) is None


def test_vllm_gets_the_stop_strings_beside_its_own() -> None:
    assert vllm_stop_kwargs(None, [STOP]) == {"stop": [STOP]}
    assert vllm_stop_kwargs({"stop": "X", "top_k": 3}, [STOP, "X"]) == {"stop": ["X", STOP], "top_k": 3}


class _Recorder:
    """Reward function keeping the completions it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, completions: list, **_: Any) -> list[float]:
        self.seen.extend(completions)
        return [float(len(c)) for c in completions]


class _StopTask:
    name = "stops"
    stop_strings = (STOP,)

    def __init__(self, reward: _Recorder) -> None:
        self.reward = reward

    def reward_funcs(self) -> list:
        return [self.reward]


def _scored_batch(model_path: Path, tmp_path: Path, completions: list[str], **config: Any):
    """A DivRLTrainer on a task declaring the stop, one scripted batch generated and scored, its loss and grads."""
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    reward = _Recorder()
    args = make_config(tmp_path, per_device_train_batch_size=4, max_completion_length=16, **config)
    trainer = DivRLTrainer(str(model_path), args=args, train_dataset=prompt_dataset(), processing_class=tokenizer,
                           peft_config=lora_config(), task=_StopTask(reward))
    randomize_lora(trainer.model)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    rows = [trainer.train_dataset[0]] * 4
    with scripted_generation(tokenizer, lambda prompt, row: completions[row]):
        inputs = trainer._generate_and_score_completions(rows)
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return trainer, tokenizer, reward.seen, inputs, loss.detach(), grads


ANSWERS = ["x AND y", "NOT x", "y", "x OR y"]


def test_tokens_after_the_stop_get_no_gradient_and_rewards_read_up_to_the_stop(tiny_qwen3: Path,
                                                                                tmp_path: Path) -> None:
    run_on = [f"{a}{STOP}\nObservations: made up {i}" for i, a in enumerate(ANSWERS)]
    other_run_on = [f"{a}{STOP}\nzz qq {i} ww" for i, a in enumerate(ANSWERS)]
    trainer, tokenizer, seen, inputs, loss, grads = _scored_batch(tiny_qwen3, tmp_path / "a", run_on)
    *_, other_inputs, other_loss, other_grads = _scored_batch(tiny_qwen3, tmp_path / "b", other_run_on)

    assert trainer.stop_strings == (STOP,)
    assert seen == [f"{a}{STOP}" for a in ANSWERS]  # the rewards read the answer up to its stop
    for ids, mask, answer in zip(inputs["completion_ids"], inputs["completion_mask"], ANSWERS, strict=True):
        kept = ids[mask.bool()].tolist()
        assert tokenizer.decode(kept).endswith(STOP) and STOP not in tokenizer.decode(kept[:-1])
        assert tokenizer.decode(kept).startswith(answer)
    assert torch.equal(inputs["completion_mask"], other_inputs["completion_mask"])
    # whatever follows the stop, the loss and every gradient are the same: those tokens take no part
    torch.testing.assert_close(loss, other_loss, rtol=0, atol=0)
    assert grads.keys() == other_grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, other_grads[name], rtol=0, atol=0, msg=name)
    logs = trainer._metrics["train"]
    assert logs["divrl/stop/ratio"] == [1.0]
    assert logs["divrl/stop/mean_length_unstopped"][0] > logs["completions/mean_length"][0]


def test_a_completion_without_a_stop_is_unchanged(tiny_qwen3: Path, tmp_path: Path) -> None:
    completions = ["x AND y", "NOT x or not", "y y y", "x OR y"]
    _, _, seen, inputs, loss, grads = _scored_batch(tiny_qwen3, tmp_path / "stop", completions)
    _, _, plain_seen, plain_inputs, plain_loss, plain_grads = _scored_batch(tiny_qwen3, tmp_path / "plain",
                                                                         completions, stop_strings=[])
    assert seen == plain_seen == completions
    assert torch.equal(inputs["completion_ids"], plain_inputs["completion_ids"])
    assert torch.equal(inputs["completion_mask"], plain_inputs["completion_mask"])
    torch.testing.assert_close(loss, plain_loss, rtol=0, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, plain_grads[name], rtol=0, atol=0, msg=name)


def test_stop_strings_refuse_masking_truncated_completions(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl import DivRLTrainer

    args = make_config(tmp_path, mask_truncated_completions=True)
    with pytest.raises(ValueError, match="stop_strings.*mask_truncated_completions"):
        DivRLTrainer(str(tiny_qwen3), args=args, train_dataset=prompt_dataset(), task=_StopTask(_Recorder()))
    with pytest.raises(ValueError, match="DivRLConfig.stop_strings"):
        make_config(tmp_path, stop_strings=[""])


class _ForcedTokens:
    """Logits processor choosing the next token as a fixed function of the prefix; row 0 writes `stop_ids`
    from its 2nd new token on."""

    def __init__(self, prompt_length: int, stop_ids: list[int], banned: set[int], vocab: int) -> None:
        self.prompt_length, self.stop_ids, self.vocab = prompt_length, stop_ids, vocab
        self.allowed = torch.tensor([t for t in range(vocab) if t not in banned])

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        chosen = self.allowed[(input_ids.sum(dim=1) * 7 + input_ids.shape[1]) % len(self.allowed)]
        step = input_ids.shape[1] - self.prompt_length
        if 1 <= step < 1 + len(self.stop_ids):
            chosen[0] = self.stop_ids[step - 1]
        return torch.full_like(scores, -float("inf")).scatter_(1, chosen[:, None], 0.0)


def test_cpu_sampler_stops_each_row_at_its_stop_string_and_shares_the_prompt_prefill(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList, StoppingCriteriaList

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    stop_ids = tokenizer("\nEND", add_special_tokens=False)["input_ids"]
    vocab = model.config.vocab_size
    banned = {t for t in range(vocab) if "END" in tokenizer.decode([t]) or t == tokenizer.eos_token_id}
    prompt = torch.randint(0, model.config.vocab_size, (1, 5), generator=torch.Generator().manual_seed(0))
    prompts = prompt.repeat(3, 1)  # a GRPO group: one prompt, three rows
    processor = LogitsProcessorList([_ForcedTokens(5, stop_ids, banned, model.config.vocab_size)])
    settings = dict(max_new_tokens=8, do_sample=True, top_k=0, logits_processor=processor,
                    attention_mask=torch.ones_like(prompts))
    # transformers' own stop-string criterion decides where the reference run stops
    expected = model.generate(prompts, stop_strings=["\nEND"], tokenizer=tokenizer, **settings)
    settings["stopping_criteria"] = StoppingCriteriaList([StopStringCriterion(tokenizer, ["\nEND"])])
    prefills = []
    original = type(model)._prefill
    undo = cpu_fast.add_decode_sampler(model)
    try:
        type(model)._prefill = lambda self, ids, *a, **k: prefills.append(ids.shape[0]) or original(self, ids, *a, **k)
        produced = model.generate(prompts, **settings)
    finally:
        type(model)._prefill = original
        undo()
    assert torch.equal(produced, expected)
    assert prefills == [1]  # the three identical rows were prefilled once
    completion = produced[0, 5:].tolist()
    cut = len(stop_ids) + 1
    assert tokenizer.decode(completion[:cut]).endswith("\nEND")
    assert all(t == model.generation_config.pad_token_id for t in completion[cut:])  # row 0 stopped there
    assert produced.shape[1] == 5 + 8  # the other rows ran to the cap
    assert "generate" not in model.__dict__  # undo gave the model back


def test_cpu_sampler_leaves_beam_search_to_transformers(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    prompts = torch.randint(0, model.config.vocab_size, (3, 4), generator=torch.Generator().manual_seed(1))
    expected = model.generate(prompts, max_new_tokens=5, num_beams=2, do_sample=False)
    cpu_fast.add_decode_sampler(model)
    produced = model.generate(prompts, max_new_tokens=5, num_beams=2, do_sample=False)
    assert produced.shape == expected.shape == (3, 9) and torch.equal(produced, expected)


def test_training_gives_the_model_back_unpatched(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from divrl import DivRLTrainer

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32)
    args = make_config(tmp_path, max_steps=1)
    trainer = DivRLTrainer(model, lambda completions, **_: [float(len(c)) for c in completions], args=args,
                           train_dataset=prompt_dataset())
    assert "generate" in model.__dict__  # patched for training on the CPU
    forward = model.__dict__.get("forward")  # TRL's own wrapper; divrl patches it on the first loss forward
    trainer.train()
    assert "generate" not in model.__dict__ and model.__dict__.get("forward") is forward
    assert "forward" not in model.get_output_embeddings().__dict__
