"""Run by test_trainers_distributed.py, once as one process and once under `accelerate launch` with two.

Trains two steps of IPS + QD + novelty + length bins on scripted completions (by global row) and writes,
from the main process, the per-step global rewards, advantages, prompts and completions, the (completion,
advantage) rows every process trained on, plus the final method state to a JSON file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from trainer_helpers import ToyTask, lora_config, make_config, prompt_dataset  # noqa: E402

GLOBAL_BATCH = 12  # 3 groups of 4: with two processes of 6 rows, the second group is split across them
STEPS = [
    ["aa", "aa", "b", "cc c", "dd", "d d", "dd", "eee", "f", "f", "f", "ggg g"],
    ["aa", "hh", "hh", "i i i", "jj", "jj", "kkkk", "l", "m", "no", "no", "no"],
]


def main(model: str, out: str) -> None:
    from accelerate import PartialState
    from transformers import AutoTokenizer, TrainerCallback

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    records: list[dict] = []

    class Record(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            logs = trainer._logs
            records.append({"prompt": list(logs["prompt"]), "completion": list(logs["completion"]),
                            "rewards": {k: list(v) for k, v in logs["rewards"].items()},
                            "advantages": list(logs["advantages"]), "trained_on": trained_on()})

    def trained_on() -> list[list]:
        """(completion, advantage) of every row each process's loss used, from all processes (a collective)."""
        from accelerate.utils import gather_object

        rows = []
        for chunk in trainer._buffered_inputs:
            for ids, mask, advantage in zip(chunk["completion_ids"], chunk["completion_mask"], chunk["advantages"],
                                            strict=True):
                rows.append([tokenizer.decode(ids[mask.bool()], skip_special_tokens=True), float(advantage)])
        return sorted(gather_object(rows))

    tokenizer = AutoTokenizer.from_pretrained(model)
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # PartialState must first be created by the config (cpu)
    args = make_config(Path(out).parent / "run", max_steps=len(STEPS),
                       per_device_train_batch_size=GLOBAL_BATCH // processes, ips=True, ips_outcome_key="text",
                       qd=True, qd_dims=[3, 3], novelty_coef=0.3, length_bins=2, max_completion_length=8)
    trainer = DivRLTrainer(model, args=args, train_dataset=prompt_dataset(), processing_class=tokenizer,
                           peft_config=lora_config(), task=ToyTask(), callbacks=[Record()])
    with scripted_generation(tokenizer, lambda prompt, row: STEPS[trainer.state.global_step][row]):
        trainer.train()
    if PartialState().is_main_process:
        state = trainer.method_state_dict()["diversity"]
        result = {"processes": trainer.accelerator.num_processes, "steps": records, "archives": state["archives"],
                  "novelty_memory": state["novelty"]["memory"].tolist()}
        Path(out).write_text(json.dumps(result))
    trainer.accelerator.wait_for_everyone()  # a rank that tears down while another still saves can deadlock gloo
    trainer.accelerator.end_training()  # destroy the process group: a live gloo thread at exit can abort a rank


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
