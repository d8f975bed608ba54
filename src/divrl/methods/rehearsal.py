"""A rehearsal set read back for training: the divergence's reference samples (DPH-RL, the DPH-RL paper), written
by `divrl sample-reference` (`divrl.trainers.rehearsal.sample_reference`), served padded with their stored reference
log-probs."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch

META_FILE = "divrl_rehearsal.json"
COLUMNS = ("prompt_ids", "completion_ids", "ref_logps")


def pad_prompt_completion(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_token_id: int
) -> dict[str, torch.Tensor]:
    """Left-pad prompts and right-pad completions like TRL; returns input_ids, attention_mask, completion_mask."""
    from trl.trainer.utils import pad

    prompts = [torch.tensor(ids, dtype=torch.long) for ids in prompt_ids]
    completions = [torch.tensor(ids, dtype=torch.long) for ids in completion_ids]
    prompt_mask = pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left")
    completion_mask = pad([torch.ones_like(c) for c in completions], padding_value=0, padding_side="right")
    input_ids = torch.cat(
        [pad(prompts, padding_value=pad_token_id, padding_side="left"),
         pad(completions, padding_value=pad_token_id, padding_side="right")], dim=1
    )
    return {"input_ids": input_ids, "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
            "completion_mask": completion_mask}


class RehearsalSet:
    """A saved rehearsal set, read back for training; `batch` serves padded rows with their log-probs."""

    def __init__(self, path: str | Path, temperature: float) -> None:
        from datasets import load_from_disk

        path = Path(path)
        meta_path = path / META_FILE
        if not meta_path.is_file():
            raise ValueError(
                f"DivRLConfig.divergence_rehearsal_path: {str(path)!r} is not a rehearsal set (no {META_FILE}); "
                "create one with `divrl sample-reference`"
            )
        self.meta = json.loads(meta_path.read_text())
        if not math.isclose(float(self.meta["temperature"]), float(temperature)):
            raise ValueError(
                f"DivRLConfig.divergence_rehearsal_path: the set was sampled at temperature "
                f"{self.meta['temperature']} but training uses temperature {temperature}; its log-probs would not "
                "match the policy's. Sample it again at the training temperature."
            )
        data = load_from_disk(str(path))
        missing = [c for c in COLUMNS if c not in data.column_names]
        if missing or len(data) == 0:
            raise ValueError(f"DivRLConfig.divergence_rehearsal_path: {str(path)!r} lacks rows or columns {missing}")
        self._rows = {c: data[c] for c in COLUMNS}

    def __len__(self) -> int:
        return len(self._rows["prompt_ids"])

    def batch(self, indices: Sequence[int], pad_token_id: int) -> dict[str, torch.Tensor]:
        """Padded input_ids / attention_mask / completion_mask and right-padded ref_logps for `indices`."""
        rows = [i % len(self) for i in indices]
        batch = pad_prompt_completion([self._rows["prompt_ids"][i] for i in rows],
                                      [self._rows["completion_ids"][i] for i in rows], pad_token_id)
        ref = torch.zeros(batch["completion_mask"].shape)
        for r, i in enumerate(rows):
            values = self._rows["ref_logps"][i]
            ref[r, : len(values)] = torch.tensor(values)
        batch["ref_logps"] = ref
        return batch
