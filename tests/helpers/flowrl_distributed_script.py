"""Run by test_flowrl_trainer.py, once as one process and once under `accelerate launch` with two.

Trains two FlowRL steps with LoRA on scripted completions (by global row) and writes, from every process,
its final log Z head and LoRA weights to `<out>/rank<i>.pt`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from trainer_helpers import distinct_chars_reward, lora_config, make_config, prompt_dataset  # noqa: E402

GLOBAL_BATCH = 8  # 2 groups of 4: with two processes each holds one group
STEPS = [["ab", "b", "abc d", "xyz", "aa", "hello", "q", "zz top"],
         ["q", "zz", "hello", "b b", "abc", "x", "yy", "ab cd"]]


def main(model: str, out: str) -> None:
    import torch
    from accelerate import PartialState
    from transformers import AutoTokenizer

    from divrl import FlowRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(model)
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # PartialState must first be created by the config (cpu)
    args = make_config(Path(out) / f"run{processes}", max_steps=len(STEPS), learning_rate=0.01,
                       per_device_train_batch_size=GLOBAL_BATCH // processes, flowrl_log_z_dropout=0.0)
    trainer = FlowRLTrainer(model, distinct_chars_reward, args=args, train_dataset=prompt_dataset(),
                            processing_class=tokenizer, peft_config=lora_config())
    with scripted_generation(tokenizer, lambda prompt, row: STEPS[trainer.state.global_step][row]):
        trainer.train()
    state = PartialState()
    lora = {n: p.detach().cpu() for n, p in trainer.model.named_parameters() if "lora_" in n}
    torch.save({"processes": state.num_processes, "head": trainer.log_z_head.state_dict(), "lora": lora},
               Path(out) / f"rank{state.process_index}.pt")
    trainer.accelerator.wait_for_everyone()  # a rank that tears down while another still saves can deadlock gloo
    trainer.accelerator.end_training()  # destroy the process group: a live gloo thread at exit can abort a rank


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
