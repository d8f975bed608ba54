"""A task from your own data: prompts and reference answers in a local JSONL / CSV / Parquet file or a `datasets`
folder saved with `save_to_disk`, rewarded by whether the completion's final answer matches the reference.

The final answer is read without evaluating anything: the text after the last `answer_marker` (default "####",
GSM8K's; "Answer:" also works), else the last `\\boxed{...}`, else the last number. It matches when the normalised
strings are equal (case, surrounding spaces and `$`, thousands separators and a trailing period ignored) or, when
both read as numbers, when they are equal within `tolerance`. The outcome key is the normalised final answer, so IPS,
the count bonus and pass@k count distinct answers; a completion without one scores 0 and has no outcome.

Every row needs a prompt and an answer. A file with a row missing either (null, NaN or blank), or with a column of
mixed value types, is refused when the task is built, with one line naming the file, the column and the first bad row:
no row is skipped silently, and none trains on the text "None".

    task: dataset
    task_args: {path: data/gsm8k_train.jsonl, prompt_column: question, answer_column: answer}
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from divrl.task import completion_text

# Longest completion tail searched for the final answer (characters): bounded work whatever a model writes.
MAX_SCANNED_CHARS = 4000
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d{1,4})?")
_BOXED = re.compile(r"\\boxed\{([^{}]{0,200})\}")
SPLITS = ("train", "test", "all")
# Columns train_dataset writes itself: a file column of the same name is not carried.
OWN_COLUMNS = ("prompt", "reference")


def normalise(answer: str) -> str:
    """The comparable form of an answer string: lower case, no `$`, spaces, thousands commas or final period."""
    text = answer.strip().lower()
    for _ in range(2):  # "$1,234$." and "1,234.$" alike
        text = text.strip("$").strip().rstrip(".").strip()
    if _NUMBER.fullmatch(text):
        text = text.replace(",", "")
    return re.sub(r"\s+", " ", text)


def _as_number(text: str) -> float | None:
    if not _NUMBER.fullmatch(text):
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _is_missing(value: Any) -> bool:
    """Whether a prompt or answer cell holds nothing: null (a missing JSON key too), NaN (an empty CSV cell in a
    numeric column) or blank text."""
    return (value is None or (isinstance(value, float) and math.isnan(value))
            or (isinstance(value, str) and not value.strip()))


def _first_unstorable(values: list[Any]) -> int:
    """The row (from 1) at which `values` stop fitting one Arrow type: the shortest failing prefix, by bisection."""
    import pyarrow

    good, bad = 0, len(values)  # values[:good] stores, values[:bad] does not
    while bad - good > 1:
        middle = (good + bad) // 2
        try:
            pyarrow.array(values[:middle])
            good = middle
        except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):
            bad = middle
    return bad


class DatasetTask:
    """Prompts and reference answers from a local file; exact or numeric match of the final answer."""

    name = "dataset"

    def __init__(self, path: str, prompt_column: str = "prompt", answer_column: str = "answer",
                 answer_marker: str | None = "####", tolerance: float = 1e-6, test_fraction: float = 0.0,
                 stop_strings: Sequence[str] = ()) -> None:
        self.path = Path(path).expanduser()
        self.prompt_column, self.answer_column = prompt_column, answer_column
        self.answer_marker = answer_marker
        if not (tolerance >= 0 and math.isfinite(tolerance)):
            raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance}")
        if not 0 <= test_fraction < 1:
            raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
        self.tolerance, self.test_fraction = tolerance, test_fraction
        self.stop_strings = tuple(stop_strings)
        self.rows = self._load()

    def _load(self) -> list[dict[str, Any]]:
        """The file's rows; ValueError naming the file and what is wrong with it."""
        import datasets

        if not self.path.exists():
            raise ValueError(f"dataset path {str(self.path)!r} does not exist")
        kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(self.path.suffix)
        try:
            if self.path.is_dir():
                data = datasets.load_from_disk(str(self.path))
                if isinstance(data, datasets.DatasetDict):
                    data = data["train"] if "train" in data else next(iter(data.values()))
            elif kind is not None:
                data = datasets.load_dataset(kind, data_files=str(self.path), split="train")
            else:
                raise ValueError("use a .jsonl, .json, .csv or .parquet file, or a folder saved with save_to_disk")
        except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as error:
            raise ValueError(f"dataset {str(self.path)!r}: {str(error).splitlines()[0]}") from None
        missing = [c for c in (self.prompt_column, self.answer_column) if c not in data.column_names]
        if missing:
            raise ValueError(f"dataset {str(self.path)!r} has no column {missing[0]!r}; its columns: "
                             f"{', '.join(data.column_names)} (set prompt_column / answer_column)")
        if len(data) == 0:
            raise ValueError(f"dataset {str(self.path)!r} has no rows")
        rows = list(data)
        self._check_rows(rows)
        return rows

    def _check_rows(self, rows: list[dict[str, Any]]) -> None:
        """Refuse (never skip) a file with a row whose prompt or answer is missing, null, NaN or blank: such a row
        would train on the text "None", or reward `#### None` as its answer. Refuse a column `train_dataset` carries
        whose values are of mixed types (5 in one row, "five" in another), which Arrow cannot store. Each error is
        one line naming the file, the column and the first bad row (rows count from 1, in file order)."""
        import pyarrow

        for role, column in (("prompt", self.prompt_column), ("answer", self.answer_column)):
            empty = [i for i, row in enumerate(rows, 1) if _is_missing(row[column])]
            if empty:
                raise ValueError(f"dataset {str(self.path)!r}: row {empty[0]} has no {role} (column {column!r} is "
                                 f"missing, null or blank in {len(empty)} of {len(rows)} rows); fill or remove them")
        for column in rows[0]:
            if column == self.prompt_column or column in OWN_COLUMNS:
                continue
            values = [row[column] for row in rows]
            try:
                pyarrow.array(values)
            except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError) as error:
                bad = _first_unstorable(values)
                raise ValueError(f"dataset {str(self.path)!r}: column {column!r} mixes value types: row {bad} holds "
                                 f"{values[bad - 1]!r:.80} ({type(values[bad - 1]).__name__}), which does not fit the "
                                 f"rows before it ({str(error).splitlines()[0]})") from None

    def final_answer(self, completion: Any) -> str | None:
        """The completion's final answer, normalised, or None when it gives none."""
        text = completion_text(completion)[-MAX_SCANNED_CHARS:]
        if self.answer_marker and self.answer_marker in text:
            tail = text.rsplit(self.answer_marker, 1)[1].strip().split("\n", 1)[0]
            return normalise(tail) or None
        boxed = _BOXED.findall(text)
        if boxed:
            return normalise(boxed[-1]) or None
        numbers = _NUMBER.findall(text)
        return normalise(numbers[-1]) if numbers else None

    def reference(self, answer: Any) -> str:
        """A reference answer, normalised the way completions are (GSM8K-style answers keep what follows ####)."""
        return self.final_answer(str(answer)) or normalise(str(answer))

    def matches(self, answer: str | None, reference: str) -> bool:
        """Equal normalised strings, or numbers equal within `tolerance`."""
        if answer is None:
            return False
        if answer == reference:
            return True
        a, b = _as_number(answer), _as_number(reference)
        return a is not None and b is not None and abs(a - b) <= self.tolerance * max(1.0, abs(b))

    def answer_match(self, completions: Sequence[Any], reference: Sequence[str], **_: Any) -> list[float]:
        """1.0 where the final answer matches the row's reference, else 0.0 (any string is safe)."""
        return [float(self.matches(self.final_answer(c), r)) for c, r in zip(completions, reference, strict=True)]

    def reward_funcs(self) -> list:
        return [self.answer_match]

    def outcome_key(self, completion: Any, **row: Any) -> str | None:
        """IPS / count-bonus outcome: the normalised final answer (None without one)."""
        return self.final_answer(completion)

    def _split(self, split: str, seed: int, limit: int | None) -> list[dict[str, Any]]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
        order = list(range(len(self.rows)))
        random.Random(seed).shuffle(order)
        n_test = round(self.test_fraction * len(order))
        chosen = {"test": order[:n_test], "train": order[n_test:], "all": order}[split][:limit]
        if not chosen:
            raise ValueError(f"split {split!r} of {str(self.path)!r} is empty (test_fraction={self.test_fraction})")
        return [self.rows[i] for i in sorted(chosen)]

    def train_dataset(self, split: str = "train", style: str = "chat", seed: int = 0, limit: int | None = None,
                      n_exemplars: int = 0, **_: Any) -> Any:
        """`prompt` (chat: one user message; base: the text as is), `reference` (normalised) and the file's other
        columns."""
        from datasets import Dataset

        if style not in ("chat", "base"):
            raise ValueError(f"unknown prompt style {style!r}; choose 'chat' or 'base'")
        rows = []
        for row in self._split(split, seed, limit):
            text = str(row[self.prompt_column])
            prompt: Any = [{"role": "user", "content": text}] if style == "chat" else text
            extra = {k: v for k, v in row.items() if k != self.prompt_column and k not in OWN_COLUMNS}
            rows.append({**extra, "prompt": prompt, "reference": self.reference(row[self.answer_column])})
        return Dataset.from_list(rows)
