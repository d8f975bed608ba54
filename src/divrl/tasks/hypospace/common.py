"""What the three HypoSpace domains share: instances, splits, export, prompts, rewards and metrics.

A domain (causal, voxel, boolean) subclasses `HypoSpaceTask` and supplies only what differs: the
exhaustive enumeration of observation sets with their admissible sets H_O, a parser from model text to
a canonical hypothesis string, a semantic consistency check, behaviour descriptors and prompt pieces.
Everything else (ids, splits, JSONL / `datasets.Dataset` export, chat and few-shot prompts, the
sequential protocol, TRL reward functions, IPS outcome keys, QD descriptors, validity / uniqueness /
recovery metrics) lives here once.

Parsers only ever *read* model output: no eval/exec/sympify. `parse` returns the canonical string of a
hypothesis inside the domain's hypothesis space, or None for anything else (non-strings included); validity
of a proposal is then a set lookup `parse(text) in H_O`. A parser never reads a different hypothesis than
the one written: the answer is the first non-blank line after the label plus the following lines that
continue it (more edges, an expression going on with an operator, more rows of a layer); a continuation it
cannot read, or an answer longer than MAX_ANSWER_CHARS, gives None rather than a cut-off answer.

Verifiers and descriptors take canonical hypotheses: `is_consistent` is False for anything outside the
space, `descriptor` raises ValueError for it (the `behavior` hook only passes what `parse` returned, so it
never raises on model output). Observations are dataset input: a malformed observation line is a
ValueError naming the line.
"""

from __future__ import annotations

import json
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from divrl.sampling import Prompt
from divrl.task import completion_text

if TYPE_CHECKING:
    from datasets import Dataset

PromptStyle = Literal["chat", "base"]
PROMPT_STYLES: tuple[str, ...] = ("chat", "base")
SPLITS: tuple[str, ...] = ("train", "test", "all", "fit", "dev")
# Share of the train split held out as "dev" (the rest is "fit"): settings such as a warm start's length are chosen
# on train data alone, fitting on "fit" and measuring on "dev", so the test split is never looked at.
DEV_FRACTION = 0.2
# Marks the end of every worked example in base (few-shot) prompts; samplers may stop on it.
END_MARKER = "END"
# Longest answer a parser reads (characters of its stripped non-blank lines): no hypothesis comes near this,
# and a longer one is unreadable rather than cut.
MAX_ANSWER_CHARS = 4000
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*")
# A line holding only the end marker: the answer stops there (base models run on into further worked examples).
_END_LINE = re.compile(rf"^[ \t]*{END_MARKER}[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Instance:
    """One observation set with its complete admissible set (canonical hypothesis strings, sorted)."""

    id: str
    domain: str
    params: dict[str, Any]
    observations: tuple[str, ...]
    hypotheses: tuple[str, ...]
    admissible: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "admissible", frozenset(self.hypotheses))

    def to_json(self) -> dict[str, Any]:
        """The JSONL record of the generation contract: id, domain, params, observations, hypotheses."""
        return {
            "id": self.id,
            "domain": self.domain,
            "params": dict(self.params),
            "observations": list(self.observations),
            "hypotheses": list(self.hypotheses),
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Instance:
        """Inverse of `to_json`; ValueError naming the field when a record is malformed."""
        for key, kind in (("id", str), ("domain", str), ("params", dict), ("observations", list), ("hypotheses", list)):
            if not isinstance(record.get(key), kind):
                raise ValueError(f"instance record needs {key!r} of type {kind.__name__}, got {record.get(key)!r}")
        return cls(
            id=record["id"],
            domain=record["domain"],
            params=dict(record["params"]),
            observations=tuple(str(o) for o in record["observations"]),
            hypotheses=tuple(str(h) for h in record["hypotheses"]),
        )


def write_jsonl(instances: Iterable[Instance], path: str | Path) -> int:
    """Write one JSON object per instance to `path`; returns the number written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as handle:
        for instance in instances:
            handle.write(json.dumps(instance.to_json(), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[Instance]:
    """Read instances written by `write_jsonl` (or `divrl hypospace generate`)."""
    instances = []
    with Path(path).open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                instances.append(Instance.from_json(json.loads(line)))
            except (ValueError, json.JSONDecodeError) as exc:
                raise ValueError(f"{path}:{line_number}: {exc}") from exc
    return instances


def split_instances(
    instances: Sequence[Instance], split: str, seed: int = 0, test_fraction: float = 0.5, limit: int | None = None
) -> list[Instance]:
    """Deterministic train/test split: shuffle with `seed`, keep the first `limit`, test = the first
    round(test_fraction * kept) of those, train = the rest; each split keeps generation order. Within train,
    "dev" is its first round(DEV_FRACTION * |train|) instances in shuffled order and "fit" the rest (no test
    instance is in either)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    order = list(range(len(instances)))
    random.Random(seed).shuffle(order)
    kept = order[:limit] if limit is not None else order
    n_test = round(test_fraction * len(kept))
    train = kept[n_test:]
    n_dev = round(DEV_FRACTION * len(train))
    chosen = {"test": kept[:n_test], "train": train, "all": kept, "dev": train[:n_dev], "fit": train[n_dev:]}[split]
    return [instances[i] for i in sorted(chosen)]


# ----------------------------------------------------------------------------------------------------
# Reading model output


def answer_region(text: str, label: re.Pattern[str]) -> str:
    """The text after the first `label` (e.g. "Graph:"), or the whole text without one; fences removed; only
    what comes before the first END line (the worked examples' terminator).

    The first answer wins: a base model that runs on into another worked example (its own observations and
    "Expression:" label) is read up to its END, never from the invented example.
    """
    if "```" in text:
        text = _FENCE.sub("\n", text)
    text = before_end(text)
    match = label.search(text)
    return text[match.end() :] if match else text


def before_end(text: str) -> str:
    """`text` up to its first END line: one answer, not the worked examples a base model may invent after it."""
    return _END_LINE.split(text, maxsplit=1)[0]


def answer_lines(text: str, start: int = 0) -> Iterator[str]:
    """The non-blank lines of `text` from offset `start`, stripped; a parser pulls them while its answer goes on."""
    return filter(None, map(str.strip, text[start:].split("\n")))


def match_observation(domain: str, pattern: re.Pattern[str], line: Any, form: str) -> re.Match[str]:
    """`pattern` matched against a whole observation `line`; ValueError naming the line and the expected form."""
    match = pattern.fullmatch(line.strip()) if isinstance(line, str) else None
    if match is None:
        raise ValueError(f"malformed {domain} observation {line!r}; expected a line like {form!r}")
    return match


# ----------------------------------------------------------------------------------------------------
# The task base class


class HypoSpaceTask(ABC):
    """A HypoSpace domain as a divrl task: enumeration, prompts, parser, rewards, outcome keys, descriptors.

    `format_reward > 0` adds a second, shaped reward function that pays `format_reward` for any readable
    hypothesis of the space (valid or not): a denser signal for models that rarely produce the format.
    The default (0) is the IPS paper's binary validity reward alone.
    """

    domain: ClassVar[str]
    answer_label: ClassVar[str]
    # Training generation stops here (DivRLConfig.stop_strings): the END line closing every worked example.
    stop_strings: ClassVar[tuple[str, ...]] = (f"\n{END_MARKER}",)
    behavior_dims: ClassVar[int]
    behavior_names: ClassVar[tuple[str, ...]]

    def __init__(self, format_reward: float = 0.0) -> None:
        if not 0.0 <= format_reward <= 1.0:
            raise ValueError(f"format_reward must be in [0, 1], got {format_reward}")
        self.format_reward_value = float(format_reward)
        self._admissible_cache: dict[tuple[str, ...], frozenset[str]] = {}

    # -- what a domain supplies --------------------------------------------------------------------
    @property
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Generation parameters, recorded in every instance."""

    @property
    @abstractmethod
    def tag(self) -> str:
        """Short parameter tag used in instance ids, e.g. `n4-e6-k3`."""

    @abstractmethod
    def enumerate(self) -> Iterable[tuple[list[str], list[str]]]:
        """Every observation set with a non-empty admissible set: (observation lines, sorted hypotheses)."""

    @abstractmethod
    def read_answer(self, text: str) -> str | None:
        """Canonical hypothesis of the space read from model text (a str), or None; never raises, never evaluates."""

    @abstractmethod
    def is_hypothesis(self, hypothesis: Any) -> bool:
        """Whether `hypothesis` is the canonical string of a hypothesis of this space."""

    @abstractmethod
    def read_observation(self, line: Any) -> Any:
        """One observation line in the domain's own form; ValueError naming the line when it is malformed."""

    @abstractmethod
    def reproduces(self, hypothesis: str, observations: Sequence[Any]) -> bool:
        """Whether canonical `hypothesis` reproduces every observation (as `read_observation` returns them)."""

    @abstractmethod
    def describe(self, hypothesis: str) -> tuple[float, ...]:
        """Behaviour descriptor in [0, 1]^behavior_dims of a hypothesis already known to be canonical."""

    @abstractmethod
    def rules(self) -> str:
        """The domain's rules, stated for the model."""

    @abstractmethod
    def observation_block(self, observations: Sequence[str]) -> str:
        """Observations as shown in prompts, with their heading."""

    @abstractmethod
    def render_answer(self, hypothesis: str) -> str:
        """A canonical hypothesis written in the answer format, label included."""

    @abstractmethod
    def format_example(self) -> str:
        """One answer in the exact answer format, shown in chat prompts."""

    # -- instances -----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"hypospace-{self.domain}"

    @cached_property
    def _instances(self) -> tuple[Instance, ...]:
        return tuple(self.iter_instances())

    def iter_instances(self) -> Iterator[Instance]:
        """All observation sets in generation order, built one at a time (nothing kept: `divrl hypospace generate`
        streams them to its JSONL); `instances()` holds the same instances in memory."""
        params = self.params
        for i, (obs, hyps) in enumerate(self.enumerate()):
            yield Instance(f"{self.domain}-{self.tag}-{i:05d}", self.domain, params, tuple(obs), tuple(hyps))

    def instances(self) -> list[Instance]:
        """All observation sets of this configuration, in generation order (computed once)."""
        return list(self._instances)

    def split(self, split: str, seed: int = 0, test_fraction: float = 0.5, limit: int | None = None) -> list[Instance]:
        """Instances of `split` ("train", "test" or "all"); see `split_instances`."""
        return split_instances(self._instances, split, seed, test_fraction, limit)

    # -- prompts -------------------------------------------------------------------------------------
    def _previous_block(self, previous: Sequence[str]) -> str:
        lines = "\n".join(self.render_answer(h) for h in dict.fromkeys(previous))
        return f"Earlier proposals (give a hypothesis that differs from every one of them):\n{lines}"

    def chat_prompt(self, instance: Instance, previous: Sequence[str] = ()) -> list[dict[str, str]]:
        """A one-message chat prompt; `previous` (canonical hypotheses) turns on the sequential protocol."""
        parts = [self.rules(), self.observation_block(instance.observations)]
        if previous:
            parts.append(self._previous_block(previous))
        parts.append(
            "Propose one hypothesis that is consistent with every observation. Reply with the answer only, "
            f"in exactly this format:\n{self.format_example()}"
        )
        return [{"role": "user", "content": "\n\n".join(parts)}]

    def base_prompt(
        self, instance: Instance, exemplars: Sequence[tuple[Instance, str]], previous: Sequence[str] = ()
    ) -> str:
        """Plain-text few-shot prompt: rules, worked examples ending in END, then the query up to the label."""
        blocks = [self.rules()]
        for example, hypothesis in exemplars:
            blocks.append(
                f"{self.observation_block(example.observations)}\n{self.render_answer(hypothesis)}\n{END_MARKER}"
            )
        query = self.observation_block(instance.observations)
        if previous:
            query += "\n" + self._previous_block(previous)
        blocks.append(f"{query}\n{self.answer_label}")
        return "\n\n".join(blocks)

    def exemplars(
        self, instance: Instance, pool: Sequence[Instance], count: int = 3, seed: int = 0
    ) -> list[tuple[Instance, str]]:
        """`count` worked examples from `pool` (other than `instance`; all instances when the pool has none),
        each with one admissible hypothesis drawn with `seed`."""
        candidates = [p for p in pool if p.id != instance.id] or [p for p in self._instances if p.id != instance.id]
        rng = random.Random(f"{seed}-exemplars")
        chosen = rng.sample(candidates, min(count, len(candidates)))
        return [(ex, random.Random(f"{seed}-{ex.id}").choice(ex.hypotheses)) for ex in chosen]

    def prompt(
        self,
        instance: Instance,
        style: PromptStyle = "chat",
        previous: Sequence[str] = (),
        exemplars: Sequence[tuple[Instance, str]] = (),
    ) -> Prompt:
        """The prompt of `instance` in `style` ("chat" message list or "base" plain text)."""
        if style == "chat":
            return self.chat_prompt(instance, previous)
        if style == "base":
            return self.base_prompt(instance, exemplars, previous)
        raise ValueError(f"unknown prompt style {style!r}; choose one of {PROMPT_STYLES}")

    def prompts_for(
        self,
        style: PromptStyle,
        seed: int = 0,
        test_fraction: float = 0.5,
        limit: int | None = None,
        n_exemplars: int = 3,
    ) -> Callable[[Instance, Sequence[str]], Prompt]:
        """A prompt builder `build(instance, previous=())` for `style`; base-style worked examples come from the
        train split of the same (seed, test_fraction, limit), so test prompts never show test answers."""
        if style not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt style {style!r}; choose one of {PROMPT_STYLES}")
        pool = self.split("train", seed, test_fraction, limit)

        def build(instance: Instance, previous: Sequence[str] = ()) -> Prompt:
            shots = self.exemplars(instance, pool, n_exemplars, seed) if style == "base" else ()
            return self.prompt(instance, style, previous, shots)

        return build

    def _prompted_split(
        self, split: str, style: PromptStyle, seed: int, test_fraction: float, limit: int | None, n_exemplars: int
    ) -> list[tuple[Instance, Prompt]]:
        """The instances of `split` with their prompts; ValueError when the split is empty."""
        instances = self.split(split, seed, test_fraction, limit)
        if not instances:
            raise ValueError(f"split {split!r} of {self.name} {self.params} is empty")
        build = self.prompts_for(style, seed, test_fraction, limit, n_exemplars)
        return [(instance, build(instance)) for instance in instances]

    def train_dataset(
        self,
        split: str = "train",
        style: PromptStyle = "chat",
        seed: int = 0,
        test_fraction: float = 0.5,
        limit: int | None = None,
        n_exemplars: int = 3,
    ) -> Dataset:
        """A TRL-ready `datasets.Dataset`: `prompt` plus the `id`, `observations`, `hypotheses` columns."""
        from datasets import Dataset

        return Dataset.from_list(
            [
                {
                    "prompt": prompt,
                    "id": inst.id,
                    "observations": list(inst.observations),
                    "hypotheses": list(inst.hypotheses),
                }
                for inst, prompt in self._prompted_split(split, style, seed, test_fraction, limit, n_exemplars)
            ]
        )

    def sft_dataset(
        self,
        split: str = "train",
        style: PromptStyle = "base",
        seed: int = 0,
        test_fraction: float = 0.5,
        limit: int | None = None,
        n_exemplars: int = 0,
        per_instance: int = 4,
        sample_seed: int = 0,
    ) -> Dataset:
        """Prompt-completion rows for a supervised warm start (TRL's SFTTrainer): each instance's prompt (as
        `train_dataset` builds it) with up to `per_instance` of its admissible hypotheses, drawn uniformly without
        replacement with `sample_seed`, one row each, written in the answer format. Base-style completions continue
        the prompt's answer label and end with the END line that stops training generation; chat-style ones are
        the assistant's reply. Several hypotheses per observation set teach that an instance has many answers."""
        from datasets import Dataset

        if per_instance < 1:
            raise ValueError(f"per_instance must be >= 1 (admissible hypotheses per instance), got {per_instance}")
        rng = random.Random(f"{sample_seed}-sft")
        rows = []
        for instance, prompt in self._prompted_split(split, style, seed, test_fraction, limit, n_exemplars):
            for hypothesis in rng.sample(instance.hypotheses, min(per_instance, len(instance.hypotheses))):
                answer = self.render_answer(hypothesis)
                if style == "base":
                    completion: Any = f"{answer.removeprefix(self.answer_label)}\n{END_MARKER}"
                else:
                    completion = [{"role": "assistant", "content": answer}]
                rows.append({"prompt": prompt, "completion": completion, "id": instance.id})
        return Dataset.from_list(rows)

    # -- reading, verification, rewards and hooks ----------------------------------------------------
    def parse(self, text: Any) -> str | None:
        """Canonical hypothesis of the space read from model text, or None (also for non-strings); never raises."""
        return self.read_answer(text) if isinstance(text, str) else None

    def is_consistent(self, hypothesis: str, observations: Sequence[str]) -> bool:
        """Semantic check (no lookup): does canonical `hypothesis` reproduce every observation? False for anything
        outside the space; ValueError naming the first malformed observation line."""
        if isinstance(observations, str):
            raise ValueError(f"observations must be a list of lines, not one string: {observations!r}")
        facts = [self.read_observation(line) for line in observations]
        return self.is_hypothesis(hypothesis) and self.reproduces(hypothesis, facts)

    def descriptor(self, hypothesis: str) -> tuple[float, ...]:
        """Behaviour descriptor in [0, 1]^behavior_dims of a canonical hypothesis; ValueError for anything else."""
        if not self.is_hypothesis(hypothesis):
            raise ValueError(f"descriptor needs a canonical {self.domain} hypothesis of this space, got {hypothesis!r}")
        return self.describe(hypothesis)

    def admissible_set(self, hypotheses: Iterable[str]) -> frozenset[str]:
        """H_O as a frozenset, cached per distinct column value so repeated rows cost one hash."""
        if isinstance(hypotheses, frozenset):
            return hypotheses
        key = tuple(hypotheses)
        cached = self._admissible_cache.get(key)
        if cached is None:
            cached = self._admissible_cache[key] = frozenset(key)
        return cached

    def is_valid(
        self, completion: Any, hypotheses: Iterable[str] | None = None, observations: Sequence[str] | None = None
    ) -> bool:
        """Whether a completion states an admissible hypothesis: H_O lookup, or the semantic check without H_O."""
        hypothesis = self.parse(completion_text(completion))
        if hypothesis is None:
            return False
        if hypotheses is not None:
            return hypothesis in self.admissible_set(hypotheses)
        if observations is not None:
            return self.is_consistent(hypothesis, observations)
        raise ValueError("validity needs the 'hypotheses' column (admissible set) or the 'observations' column")

    def validity_reward(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        hypotheses: Sequence[Sequence[str]] | None = None,
        observations: Sequence[Sequence[str]] | None = None,
        **_: Any,
    ) -> list[float]:
        """Binary reward (IPS paper): 1.0 when the completion parses to an admissible hypothesis, else 0.0."""
        if hypotheses is None and observations is None:
            raise ValueError("validity_reward needs the 'hypotheses' (admissible set) or 'observations' column")
        missing = [None] * len(completions)
        columns = zip(completions, hypotheses or missing, observations or missing, strict=True)
        return [float(self.is_valid(c, h, o)) for c, h, o in columns]

    def format_reward(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        """Shaped format reward: `format_reward` for a readable hypothesis of the space, else 0."""
        return [self.format_reward_value * (self.parse(completion_text(c)) is not None) for c in completions]

    def reward_funcs(self) -> list[Callable[..., list[float]]]:
        """TRL reward functions: validity, plus the format reward when `format_reward > 0`."""
        return [self.validity_reward, self.format_reward] if self.format_reward_value > 0 else [self.validity_reward]

    def outcome_key(self, completion: Any, **row: Any) -> str | None:
        """IPS / recovery outcome: the canonical hypothesis string, None when unreadable."""
        return self.parse(completion_text(completion))

    def behavior(self, completion: Any, **row: Any) -> tuple[float, ...] | None:
        """QD descriptor in [0, 1]^behavior_dims of the completion's hypothesis, None when unreadable."""
        hypothesis = self.parse(completion_text(completion))
        return None if hypothesis is None else self.descriptor(hypothesis)

    def recovery_eval_callback(self, trainer: Any, held_out: Any, *, instances: int | None, samples: int,
                               max_new_tokens: int | None) -> Any:
        """The held-out recovery curve while `trainer` trains (`RecoveryEvalCallback`, sampling the `held_out`
        rows with their admissible sets): what `recovery_eval` asks of a task in `divrl train` and `divrl sft`."""
        from divrl.tasks.hypospace.recovery_callback import RecoveryEvalCallback

        return RecoveryEvalCallback(trainer, self, dataset=held_out, instances=instances, samples=samples,
                                    max_new_tokens=max_new_tokens)


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """`value` as an int in [low, high], else ValueError naming the parameter and its range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value
