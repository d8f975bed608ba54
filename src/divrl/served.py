"""Sampling from a served model: any OpenAI-compatible endpoint (`vllm serve`, `trl vllm-serve`, `transformers serve`,
llama.cpp's server, hosted APIs), so the evaluators compare a fine-tuned model with what is served or can be called.

Plain-text prompts go to `/completions`, chat prompts to `/chat/completions`. `n` samples are asked in one request;
a server that returns fewer (some ignore `n`) is asked again, requests running `max_concurrency` at a time.
Timeouts, connection errors, 429 and 5xx answers are retried with exponential backoff; any other 4xx is a one-line
ValueError with the server's message. The API key is read from an environment variable and sent only in the
Authorization header: it is never part of a result, a resume record or a message.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from divrl import sampling
from divrl.sampling import Prompt, Sampler, SamplingConfig, truncate_at_stop

RETRIED_STATUS = (408, 429, 500, 502, 503, 504)


class ServedSampler:
    """`sampler(prompts, n)` over HTTP: n completion strings per prompt from `model` at `base_url`."""

    has_chat_template = True  # the server applies its model's template to chat prompts

    def __init__(self, base_url: str, model: str, config: SamplingConfig, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 120.0, retries: int = 5, max_concurrency: int = 8) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"--base-url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model, self.config = model, config
        self.timeout, self.retries, self.max_concurrency = timeout, retries, max_concurrency
        self._api_key = os.environ.get(api_key_env, "")
        self.request_seed: int | None = config.seed

    def reseed(self, seed: int) -> None:
        """Seed the requests that follow (servers that honour OpenAI's `seed` then draw the same samples again)."""
        self.request_seed = seed

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` as JSON; retried on timeouts, connection errors, answers cut short, 429 and 5xx; ValueError on
        other errors."""
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(f"{self.base_url}{path}", data=json.dumps(body).encode(), headers=headers)
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                if error.code not in RETRIED_STATUS or attempt == self.retries:
                    detail = error.read().decode(errors="replace")[:300].replace("\n", " ")
                    raise ValueError(f"{self.base_url}{path} answered {error.code} for model {self.model!r}: "
                                     f"{detail}") from None
            # a server that dies mid-answer: refused, reset, or a body cut short (http.client.IncompleteRead)
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as error:
                if attempt == self.retries:
                    reason = getattr(error, "reason", error)
                    raise ValueError(f"{self.base_url}{path} did not answer after {self.retries + 1} attempts: "
                                     f"{reason}") from None
            except json.JSONDecodeError:
                raise ValueError(f"{self.base_url}{path} did not answer with JSON") from None
            time.sleep(min(30.0, 0.5 * 2**attempt))
        raise AssertionError("unreachable")

    def _request(self, prompt: Prompt, n: int, seed: int | None) -> list[str]:
        """Up to n completions of one prompt in one request."""
        config = self.config
        body: dict[str, Any] = {"model": self.model, "n": n, "max_tokens": config.max_new_tokens,
                                "temperature": config.temperature, "top_p": config.top_p}
        if config.stop:
            body["stop"] = list(config.stop)
        if seed is not None:
            body["seed"] = seed
        if isinstance(prompt, str):
            answer = self._post("/completions", {**body, "prompt": prompt})
            texts = [choice.get("text") for choice in answer.get("choices", [])]
        else:
            answer = self._post("/chat/completions", {**body, "messages": list(prompt)})
            texts = [(choice.get("message") or {}).get("content") for choice in answer.get("choices", [])]
        return [truncate_at_stop(t if isinstance(t, str) else "", config.stop) for t in texts][:n]

    def __call__(self, prompts: Sequence[Prompt], n: int = 1) -> list[list[str]]:
        seeds = [None if self.request_seed is None else self.request_seed + i for i in range(len(prompts))]
        with concurrent.futures.ThreadPoolExecutor(self.max_concurrency) as pool:
            outputs = list(pool.map(lambda args: self._request(*args), zip(prompts, [n] * len(prompts), seeds)))
            for index, prompt in enumerate(prompts):  # a server that ignores `n`: one request per missing sample
                missing = n - len(outputs[index])
                if missing > 0:
                    extra_seeds = [None if seeds[index] is None else seeds[index] + 7919 * (k + 1)
                                   for k in range(missing)]
                    for texts in pool.map(lambda s, p=prompt: self._request(p, 1, s), extra_seeds):
                        outputs[index].extend(texts or [""])
        return outputs


def sampler_from_args(model: str, config: SamplingConfig, args: Any) -> Sampler:
    """The sampler an evaluator's options ask for: a served model at `--base-url`, else `model` loaded here."""
    if getattr(args, "base_url", None):
        return ServedSampler(args.base_url, model, config, api_key_env=args.api_key_env,
                             timeout=args.request_timeout, max_concurrency=args.max_concurrency)
    return sampling.make_sampler(model, config, backend=args.backend, quantize=args.quantize, dtype=args.dtype)
