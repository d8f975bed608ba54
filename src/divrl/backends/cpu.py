"""Faster GRPO steps on the CPU with the same training semantics (same log-probs, loss and sampling).

TRL computes per-token log-probs through a fused, chunked LM head. On devices without Triton (the CPU) it
projects every position of every sequence, prompt included (about 4x the completion tokens with a few-shot
prompt), allocates several logits-sized temporaries per tile, and its backward recomputes the whole
`hidden @ W.T` projection. With Gemma 3's 262k-token vocabulary that projection dominates a CPU step.

`CPUKernels` replaces that path on the CPU by `SampledTokenLogProb`: only completion positions are
projected, in row tiles (reused buffers) with an exact log-sum-exp, and the gradient with respect to the
hidden states is prepared during the forward pass in closed form,

    d log p_t / d h = inv_temperature * (s'_t W_t - sum_j p_j s'_j W_j)   (s' = softcap slope, 1 without),

so the backward costs no second projection. The entropy comes from the same pass. Gradients the closed form
does not cover (through the entropy, e.g. an entropy bonus; into the LM-head weight, e.g. full fine-tuning)
are computed by recomputing the projection in the backward, as TRL does. Mixed precision, multimodal inputs,
MoE auxiliary losses, rescaled logits and non-CPU devices use TRL's own path unchanged.

Generation keeps TRL's settings and logits processors. Two changes make each decoding step cheaper on the CPU
without changing what is sampled: the LM head computes `W @ x.T` for few-row inputs (`add_decode_lm_head`,
about half the time of MKL's `x @ W.T` for a 262k x 640 weight), and the next token is drawn by inverting the
float64 CDF with one uniform per sequence (`sample_categorical`, the same distribution as `torch.multinomial`,
which draws one exponential variate per vocabulary entry).
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any

import torch

# Rows of `hidden @ W.T` projected at once: bounds each float32 logits tile (rows x vocab) to this many bytes.
LOGITS_TILE_BYTES = 64 * 2**20
# Text-config attributes that rescale logits in some architectures; models with them use TRL's path.
_LOGIT_SCALE_ATTRS = ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
# Keyword answered by the patched forward of the causal LM (passes through the PEFT and DDP wrappers).
FAST_LOGPS_KWARG = "divrl_sampled_logps"
_PATCHED_MARKER = "_divrl_sampled_logps_temperature"
# Up to this many rows, the LM head computes `W @ x.T` (measured ~2x faster than MKL's `x @ W.T` for 8 rows
# and a 262k x 640 float32 weight; still faster at 256 rows): decoding and generation prefill.
DECODE_HEAD_MAX_ROWS = 256
_DECODE_HEAD_MARKER = "_divrl_decode_head"
_SAMPLER_MARKER = "_divrl_cpu_sampler"


class SampledTokenLogProb(torch.autograd.Function):
    """log p(target) and, optionally, the entropy of softmax(softcap(hidden @ weight.T) / temperature).

    Returns `(logps, entropy or None)`, both (N,), in the dtype of `hidden` (float32 in the trainers).
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,  # (N, H)
        weight: torch.Tensor,  # (V, H)
        targets: torch.Tensor,  # (N,)
        inv_temperature: float,
        softcap: float | None,
        compute_entropy: bool,
        entropy_needs_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        ctx.set_materialize_grads(False)
        n, vocab = hidden.shape[0], weight.shape[0]
        # The closed form needs sum_j p_j s'_j W_j; skip it when the backward must recompute the tiles anyway.
        closed_form = hidden.requires_grad and not weight.requires_grad and not entropy_needs_grad
        logps = hidden.new_empty(n)
        log_z = hidden.new_empty(n)
        entropy = hidden.new_empty(n) if compute_entropy else None
        expected_w = hidden.new_empty(hidden.shape) if closed_form else None
        target_slope = hidden.new_ones(n)
        tiles = _row_tiles(n, vocab)
        z_buffer = hidden.new_empty(tiles[0].stop - tiles[0].start, vocab)
        p_buffer = torch.empty_like(z_buffer) if compute_entropy or closed_form else None
        for rows in tiles:
            z = _logits_into(z_buffer, hidden[rows], weight, inv_temperature, softcap)
            target_z = z.gather(1, targets[rows, None]).squeeze(1)
            row_max = z.amax(dim=1)
            if p_buffer is None:
                lse = row_max + torch.exp(z.sub_(row_max[:, None]), out=z).sum(dim=1).log()
            else:
                p = torch.sub(z, row_max[:, None], out=p_buffer[: z.shape[0]]).exp_()
                total = p.sum(dim=1)
                lse = row_max + total.log()
                p.div_(total[:, None])
                if entropy is not None:  # H = log Z - sum_j p_j z_j
                    entropy[rows] = lse - _rowwise_dot(p, z)
                if closed_form:
                    if softcap is not None:
                        target_slope[rows] = _softcap_slope_(target_z.clone(), softcap, inv_temperature)
                        p.mul_(_softcap_slope_(z, softcap, inv_temperature))
                    expected_w[rows] = p @ weight
            log_z[rows] = lse
            logps[rows] = target_z - lse
        ctx.save_for_backward(hidden, weight, targets, log_z, entropy, expected_w, target_slope)
        ctx.inv_temperature, ctx.softcap = inv_temperature, softcap
        return logps, entropy

    @staticmethod
    def backward(ctx: Any, grad_logps: torch.Tensor | None, grad_entropy: torch.Tensor | None):  # type: ignore[override]
        hidden, weight, targets, log_z, entropy, expected_w, target_slope = ctx.saved_tensors
        inv_t, softcap = ctx.inv_temperature, ctx.softcap
        if expected_w is not None and grad_entropy is None:
            grad_hidden = None
            if grad_logps is not None:
                direction = weight[targets] * target_slope[:, None] - expected_w
                grad_hidden = grad_logps[:, None] * inv_t * direction
            return grad_hidden, None, None, None, None, None, None
        grad_hidden, grad_weight = _recomputed_grads(
            hidden, weight, targets, log_z, entropy, grad_logps, grad_entropy, inv_t, softcap, ctx.needs_input_grad
        )
        return grad_hidden, grad_weight, None, None, None, None, None


def _row_tiles(n: int, vocab: int) -> list[slice]:
    step = max(1, LOGITS_TILE_BYTES // (4 * vocab))
    return [slice(start, min(start + step, n)) for start in range(0, n, step)] or [slice(0, 0)]


def _logits_into(
    buffer: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor, inv_t: float, softcap: float | None
) -> torch.Tensor:
    """softcap(hidden @ weight.T) / temperature, written into the front rows of `buffer`."""
    z = torch.mm(hidden, weight.T, out=buffer[: hidden.shape[0]])
    if softcap is None:
        return z.mul_(inv_t)
    return z.div_(softcap).tanh_().mul_(softcap * inv_t)


def _softcap_slope_(z: torch.Tensor, softcap: float, inv_t: float) -> torch.Tensor:
    """In place: the soft-cap slope 1 - tanh^2 from capped, temperature-scaled logits z = cap tanh(.) / T."""
    return z.div_(softcap * inv_t).square_().neg_().add_(1)


def _rowwise_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).view(-1)


def _recomputed_grads(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    log_z: torch.Tensor,
    entropy: torch.Tensor | None,
    grad_logps: torch.Tensor | None,
    grad_entropy: torch.Tensor | None,
    inv_t: float,
    softcap: float | None,
    needs_input_grad: tuple[bool, ...],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Hidden and weight gradients from the logits gradient of each recomputed tile."""
    grad_hidden = torch.zeros_like(hidden) if needs_input_grad[0] else None
    grad_weight = torch.zeros_like(weight) if needs_input_grad[1] else None
    tiles = _row_tiles(hidden.shape[0], weight.shape[0])
    buffer = hidden.new_empty(tiles[0].stop - tiles[0].start, weight.shape[0])
    for rows in tiles:
        z = _logits_into(buffer, hidden[rows], weight, inv_t, softcap)
        slope = None if softcap is None else _softcap_slope_(z.clone(), softcap, inv_t)
        log_p = z.sub_(log_z[rows, None])
        p = log_p.exp()
        # dL/dz_j = g_logp (1[j = t] - p_j) - g_H p_j (log p_j + H), built in the log_p buffer
        coefficient = log_p
        if grad_entropy is None:
            coefficient.zero_()
        else:
            coefficient.add_(entropy[rows, None]).mul_(grad_entropy[rows, None])
        if grad_logps is not None:
            coefficient.add_(grad_logps[rows, None])
        grad_z = coefficient.mul_(p).neg_()
        if grad_logps is not None:
            grad_z.scatter_add_(1, targets[rows, None], grad_logps[rows, None])
        grad_z.mul_(inv_t)
        if slope is not None:
            grad_z.mul_(slope)
        if grad_hidden is not None:
            grad_hidden[rows] = grad_z @ weight
        if grad_weight is not None:
            grad_weight.addmm_(grad_z.T, hidden[rows])
    return grad_hidden, grad_weight


Undo = Callable[[], None]


def patch_attribute(obj: Any, name: str, value: Any, marker: str, marker_value: Any = True) -> Undo:
    """Set the instance attribute `name` (and `marker`) of `obj`; the returned callable puts back what was there,
    where the attribute still holds what this patch set: a value someone set since is theirs, and stays."""
    saved = {key: obj.__dict__[key] for key in (name, marker) if key in obj.__dict__}
    installed = {name: value, marker: marker_value}

    def undo() -> None:
        if obj.__dict__.get(name, _MISSING) is not value:  # replaced since: neither it nor the marker is ours to undo
            return
        for key in (name, marker):
            if key in saved:
                setattr(obj, key, saved[key])
            elif obj.__dict__.get(key, _MISSING) is installed[key]:
                delattr(obj, key)

    setattr(obj, name, value)
    setattr(obj, marker, marker_value)
    return undo


_MISSING = object()


def _prompt_sharing_allowed(backbone: torch.nn.Module) -> bool:
    """Whether computing a shared prompt once keeps the loss exact: no active dropout (one mask per prompt instead
    of one per row would change the loss's noise) and no activation checkpointing (its recomputation would
    update the prompt's KV cache a second time)."""
    return not any(
        getattr(m, "gradient_checkpointing", False) or (isinstance(m, torch.nn.Dropout) and m.training and m.p > 0)
        for m in backbone.modules()
    )


def _first_rows(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """For the rows of `keys` (B, ...): the index of each distinct row's first occurrence and, per row, which
    distinct row it is (`rows = first[inverse]`); None when every row is distinct."""
    unique, inverse = torch.unique(keys.flatten(1), dim=0, return_inverse=True)
    if unique.shape[0] == keys.shape[0]:
        return None
    positions = torch.arange(keys.shape[0], device=keys.device)
    first = torch.full((unique.shape[0],), keys.shape[0], dtype=torch.long, device=keys.device)
    first = first.scatter_reduce(0, inverse, positions, reduce="amin")
    return first, inverse


# The KV cache's name in model outputs, forward kwargs and generation kwargs: `cache` from transformers 5.24,
# `past_key_values` before (5.24 still accepts it in forward, with a deprecation warning, but not in `generate`).
_CACHE_KEY, _LEGACY_CACHE_KEY = "cache", "past_key_values"


def _expandable_cache(cache: Any) -> bool:
    """A cache whose rows can be re-indexed exactly (transformers' dynamic full / sliding-window layers)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    return type(cache) is DynamicCache and all(
        type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers
    )


def shared_prompt_hidden_states(
    backbone: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> torch.Tensor | None:
    """Last hidden states of positions -logits_to_keep-1 .. -1, computing each distinct prompt once.

    The rows of a GRPO batch share their prompt G at a time. The prompt part (all but the last `logits_to_keep`
    tokens) of each distinct row runs once with a KV cache, the cache is indexed out to every row (index_select,
    so gradients from all the group's completions flow back into the one prompt pass) and the completions run on
    it. Positions, masks and attention are those of the full-sequence forward, so the result equals it up to float
    summation order. None (the caller runs the full forward) when no prompt repeats or the cache cannot be
    re-indexed exactly."""
    prompt_length = input_ids.shape[1] - logits_to_keep
    if prompt_length < 1:
        return None
    rows = _first_rows(torch.cat([input_ids[:, :prompt_length], attention_mask[:, :prompt_length]], dim=1))
    if rows is None:
        return None
    first, inverse = rows
    prompt = backbone(
        input_ids=input_ids[first, :prompt_length], attention_mask=attention_mask[first, :prompt_length], use_cache=True
    )
    cache_key = _CACHE_KEY if _CACHE_KEY in prompt else _LEGACY_CACHE_KEY
    cache = prompt[cache_key]
    if not _expandable_cache(cache):
        return None
    cache.reorder_cache(inverse)
    completion = backbone(
        input_ids=input_ids[:, prompt_length:], attention_mask=attention_mask, use_cache=True, **{cache_key: cache}
    )
    return torch.cat([prompt.last_hidden_state[inverse, -1:], completion.last_hidden_state], dim=1)


def add_sampled_token_head(causal_lm: Any, temperature: float) -> Undo:
    """Patch `causal_lm.forward`: with `divrl_sampled_logps=(logits_to_keep, compute_entropy, entropy_needs_grad)`
    it returns `(logps, entropy or None)` of the last `logits_to_keep` tokens, shape (B, logits_to_keep), zero
    where the attention mask is 0 (as TRL's fused head); without it, the previous forward runs unchanged.

    Rows that share their prompt compute it once (`shared_prompt_hidden_states`) unless a dropout is active, which
    would then draw one mask per prompt instead of one per row."""
    previous_forward = causal_lm.forward
    softcap = getattr(causal_lm.config.get_text_config(), "final_logit_softcapping", None)

    @functools.wraps(type(causal_lm).forward)  # `generate` validates its kwargs against this signature
    def forward(self: Any, *args: Any, divrl_sampled_logps: tuple[int, bool, bool] | None = None, **kwargs: Any):
        if divrl_sampled_logps is None:
            return previous_forward(*args, **kwargs)
        logits_to_keep, compute_entropy, entropy_needs_grad = divrl_sampled_logps
        input_ids, attention_mask = kwargs["input_ids"], kwargs["attention_mask"]
        # The backbone is looked up on each call: PEFT and FSDP replace modules after patching.
        backbone = self.base_model
        hidden = None
        if _prompt_sharing_allowed(backbone):
            hidden = shared_prompt_hidden_states(backbone, input_ids, attention_mask, logits_to_keep)
        if hidden is None:
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
            hidden = hidden[:, -logits_to_keep - 1 :]
        mask = attention_mask[:, -logits_to_keep:].bool()
        logps, entropy = SampledTokenLogProb.apply(
            hidden[:, :-1][mask],
            self.get_output_embeddings().weight,
            input_ids[:, -logits_to_keep:][mask],
            1.0 / temperature,
            softcap,
            compute_entropy,
            entropy_needs_grad,
        )
        # masked_scatter keeps an all-masked batch connected to the graph (a differentiable zero)
        logps = logps.new_zeros(mask.shape).masked_scatter(mask, logps)
        return logps, None if entropy is None else entropy.new_zeros(mask.shape).masked_scatter(mask, entropy)

    return patch_attribute(causal_lm, "forward", types.MethodType(forward, causal_lm), _PATCHED_MARKER, temperature)


def add_decode_lm_head(causal_lm: Any) -> Undo:
    """Patch the LM head's forward so few-row inputs (decoding: one position per sequence) compute `W @ x.T`,
    the faster BLAS layout for a tall vocabulary matrix; same logits up to float summation order."""
    head = causal_lm.get_output_embeddings()
    if getattr(head, _DECODE_HEAD_MARKER, False) or head.bias is not None:
        return lambda: None
    previous_forward = head.forward

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > DECODE_HEAD_MAX_ROWS or x.device.type != "cpu" or x.dtype != self.weight.dtype:
            return previous_forward(x)
        return (self.weight @ rows.T).T.reshape(*x.shape[:-1], self.weight.shape[0])

    return patch_attribute(head, "forward", types.MethodType(forward, head), _DECODE_HEAD_MARKER)


def sample_categorical(probs: torch.Tensor) -> torch.Tensor:
    """One token per row of `probs` (B, V) by inverting the row's float64 CDF with one uniform draw.

    The same distribution as `torch.multinomial(probs, 1)`, which draws an exponential variate per vocabulary
    entry (2M per step for 8 rows of a 262k vocabulary; about 3x slower on the CPU). Tokens of probability 0
    are never drawn.
    """
    cdf = probs.double().cumsum_(dim=-1)
    total = cdf[:, -1:]
    uniform = torch.rand(total.shape, dtype=torch.float64, device=probs.device) * total
    uniform = torch.minimum(uniform, torch.nextafter(total, torch.zeros_like(total)))  # strictly below the total
    return torch.searchsorted(cdf, uniform, right=True).squeeze(1)


def cpu_sample(
    model: Any,
    input_ids: torch.Tensor,
    logits_processor: Any,
    stopping_criteria: Any,
    generation_config: Any,
    synced_gpus: bool = False,
    streamer: Any = None,
    sampled_logps_sink: Callable[[torch.Tensor], None] | None = None,
    **model_kwargs: Any,
) -> torch.Tensor:
    """transformers' multinomial-sampling loop (`GenerationMixin._sample`) drawing with `sample_categorical`;
    a `custom_generate` callable. Other decoding modes and rich outputs run transformers' own loop.

    `sampled_logps_sink`, when given, receives the log-probability of every drawn token under the distribution it
    was drawn from (after the logits processors: temperature, top-k/p, ...), shape (B, new tokens), at no extra
    forward pass; rows that had finished carry meaningless values there."""
    from transformers.generation.utils import GenerationMixin

    if not generation_config.do_sample or generation_config.return_dict_in_generate or streamer or synced_gpus:
        return GenerationMixin._sample(
            model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus, streamer,
            **model_kwargs,
        )  # fmt: skip
    pad_token = generation_config._pad_token_tensor
    stops_at_eos = any(hasattr(criterion, "eos_token_id") for criterion in stopping_criteria)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    outputs = _prefill_distinct_rows(model, input_ids, generation_config, model_kwargs)
    sampled_logps: list[torch.Tensor] = []
    while True:
        model_kwargs = model._update_model_kwargs_for_generation(outputs, model_kwargs)
        logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32)
        probs = torch.softmax(logits_processor(input_ids, logits), dim=-1)
        next_tokens = sample_categorical(probs)
        if sampled_logps_sink is not None:
            sampled_logps.append(probs.gather(1, next_tokens[:, None]).squeeze(1).log())
        if stops_at_eos:
            next_tokens = torch.where(unfinished, next_tokens, pad_token)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        unfinished &= ~stopping_criteria(input_ids, None)
        if not unfinished.any():
            if sampled_logps_sink is not None:
                sampled_logps_sink(torch.stack(sampled_logps, dim=1))
            return input_ids
        del outputs
        next_length = 1 if model_kwargs["use_cache"] else None
        model_inputs = model.prepare_inputs_for_generation(input_ids, next_sequence_length=next_length, **model_kwargs)
        outputs = model(**model_inputs, return_dict=True)


def _rows_cut_cleanly(model_kwargs: dict, batch: int) -> bool:
    """Whether every input the prefill reads can be cut to the distinct rows: tensors with one row per prompt row
    (or none, like cache positions). Images and other multimodal inputs (several images per row, or encoder outputs
    in nested containers, as transformers 5 passes a vision tower's) cannot, so those prompts prefill as they are."""
    for key, value in model_kwargs.items():
        if key in (_CACHE_KEY, _LEGACY_CACHE_KEY):
            continue
        if isinstance(value, torch.Tensor):
            if value.dim() >= 2 and value.shape[0] != batch:
                return False
        elif _holds_tensor(value):
            return False
    return True


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return hasattr(value, "__dict__") and any(_holds_tensor(v) for v in vars(value).values())


def _prefill_distinct_rows(model: Any, input_ids: torch.Tensor, generation_config: Any, model_kwargs: dict) -> Any:
    """`model._prefill`, running each distinct prompt row once and indexing its KV cache and logits out to the
    row's copies (`num_return_sequences` and GRPO groups repeat every prompt n times): the same outputs for n times
    fewer prefill FLOPs. Falls back to the plain prefill when no row repeats or the cache cannot be re-indexed."""
    mask = model_kwargs.get("attention_mask")
    cache = model_kwargs.get(_CACHE_KEY, model_kwargs.get(_LEGACY_CACHE_KEY))
    rows = None
    if (model_kwargs.get("inputs_embeds") is None and _expandable_cache(cache) and cache.get_seq_length() == 0
            and _rows_cut_cleanly(model_kwargs, input_ids.shape[0])):
        rows = _first_rows(input_ids if mask is None else torch.cat([input_ids, mask], dim=1))
    if rows is None:
        return model._prefill(input_ids, generation_config, model_kwargs)
    first, inverse = rows
    batch = input_ids.shape[0]
    distinct_kwargs = {
        key: value[first] if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[0] == batch else value
        for key, value in model_kwargs.items()
    }
    outputs = model._prefill(input_ids[first], generation_config, distinct_kwargs)
    cache.reorder_cache(inverse)
    outputs.logits = outputs.logits[inverse]
    return outputs


def _plain_sampling(causal_lm: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a `generate(**kwargs)` call decodes by plain multinomial sampling (one beam, no assistant, no
    `stop_strings`): what `cpu_sample` implements."""
    from transformers.generation.configuration_utils import GenerationMode

    if kwargs.get("streamer") is not None:
        return False
    config = copy.deepcopy(kwargs.get("generation_config") or causal_lm.generation_config)
    config.update(**{key: value for key, value in kwargs.items() if hasattr(config, key)})
    # transformers drops `tokenizer` for a `custom_generate` callable and would then refuse `stop_strings`
    # (divrl passes stops as a stopping criterion instead: divrl.backends.stop_strings.StopStringCriterion)
    mode = config.get_generation_mode(kwargs.get("assistant_model"))
    return mode == GenerationMode.SAMPLE and not config.stop_strings


def _class_generate(causal_lm: Any) -> Callable[..., Any]:
    """The class's `generate` bound to `causal_lm` as Python would bind it without the instance patch: a function
    (or an autospec'd one) becomes a bound method; a class-level mock, which is no descriptor, is called as is."""
    generate = type(causal_lm).generate
    return generate.__get__(causal_lm, type(causal_lm)) if hasattr(type(generate), "__get__") else generate


def add_decode_sampler(causal_lm: Any, sampled_logps_sink: Callable[[torch.Tensor], None] | None = None) -> Undo:
    """Make `causal_lm.generate` sample with `cpu_sample` when it samples plainly and no `custom_generate` is
    given; beam search, assisted decoding and the rest run transformers' own code. `sampled_logps_sink` receives
    each such call's sampled-token log-probs (see `cpu_sample`)."""
    if getattr(causal_lm, _SAMPLER_MARKER, False):
        return lambda: None
    sampler = functools.partial(cpu_sample, sampled_logps_sink=sampled_logps_sink) if sampled_logps_sink else cpu_sample

    @functools.wraps(causal_lm.generate)
    def generate_with_cpu_sampler(*args: Any, custom_generate: Any = None, **kwargs: Any) -> Any:
        # The class's `generate` is looked up at call time, so patches of it (e.g. divrl.testing's
        # scripted_generation) still apply.
        if custom_generate is None and _plain_sampling(causal_lm, kwargs):
            custom_generate = sampler
        return _class_generate(causal_lm)(*args, custom_generate=custom_generate, **kwargs)

    return patch_attribute(causal_lm, "generate", generate_with_cpu_sampler, _SAMPLER_MARKER)


def supports_sampled_token_head(causal_lm: Any) -> bool:
    """Whether `SampledTokenLogProb` computes exactly what TRL's head would: a float32 text-only causal LM
    without logit rescaling."""
    config = causal_lm.config
    head = causal_lm.get_output_embeddings()
    text_config = config.get_text_config()
    return (
        text_config is config
        and head is not None
        and getattr(head, "bias", None) is None
        and head.weight.dtype == torch.float32
        and all(getattr(text_config, name, None) is None for name in _LOGIT_SCALE_ATTRS)
    )


def unwrapped_causal_lm(accelerator: Any, model: Any) -> Any:
    """The transformers causal LM inside the accelerate and PEFT wrappers of `model`."""
    from accelerate.utils import is_peft_model

    unwrapped = accelerator.unwrap_model(model)
    return unwrapped.get_base_model() if is_peft_model(unwrapped) else unwrapped


class CPUKernels:
    """divrl's CPU path for one trainer: per-token log-probs through `SampledTokenLogProb` when the inputs are on
    the CPU, in float32 without mixed precision, and generation through `add_decode_lm_head` and `cpu_sample` on
    the CPU. Elsewhere TRL's fused head runs unchanged. The trainer installs `patches` into its list of undo
    callables and undoes them when `train` returns, so the user's model is given back as it was."""

    def __init__(self, accelerator: Any, args: Any, temperature: float, keep_sampled_logps: bool) -> None:
        self.accelerator = accelerator
        self.args = args
        self.temperature = temperature
        # sampled-token log-probs of each `cpu_sample` call since the trainer last cleared it (keep_sampled_logps)
        self.sampled_logps: list[torch.Tensor] = []
        self.keep_sampled_logps = keep_sampled_logps

    def patches(self, causal_lm: Any) -> list[Undo]:
        """Patch `causal_lm`'s generation for the CPU and return how to undo each patch (`add_decode_lm_head`,
        `add_decode_sampler`); nothing on other devices. The loss-forward head is added on first use."""
        if self.accelerator.device.type != "cpu":
            return []
        sink = self.sampled_logps.append if self.keep_sampled_logps else None
        return [add_decode_lm_head(causal_lm), add_decode_sampler(causal_lm, sink)]

    def fast_logps_model(self, model: Any, patches: list[Undo]) -> Any | None:
        """The causal LM behind `model` (its loss-forward head patched on first use, the undo appended to
        `patches`), or None where TRL's path must run."""
        if self.args.bf16 or self.args.fp16:
            return None
        causal_lm = unwrapped_causal_lm(self.accelerator, model)
        if getattr(causal_lm, _PATCHED_MARKER, None) != self.temperature:
            if not supports_sampled_token_head(causal_lm):
                return None
            patches.append(add_sampled_token_head(causal_lm, self.temperature))
        return causal_lm

    def per_token_logps(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                        batch_size: int | None, compute_entropy: bool, entropy_needs_grad: bool,
                        patches: list[Undo]) -> tuple[torch.Tensor, torch.Tensor | None, None] | None:
        """TRL's `_get_per_token_logps_and_entropies` outputs computed by `SampledTokenLogProb`, or None where TRL's
        path must run (the caller checks devices, auxiliary losses and multimodal inputs first).
        `entropy_needs_grad`: the loss backpropagates through the entropies (TRL: only with its entropy bonus; a
        wrong answer costs speed, never correctness)."""
        if input_ids.device.type != "cpu" or self.fast_logps_model(model, patches) is None:
            return None
        request = (logits_to_keep, compute_entropy, compute_entropy and entropy_needs_grad)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            batch = slice(start, start + batch_size)
            batch_logps, batch_entropy = model(
                input_ids=input_ids[batch], attention_mask=attention_mask[batch], **{FAST_LOGPS_KWARG: request}
            )
            logps.append(batch_logps)
            entropies.append(batch_entropy)
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None
