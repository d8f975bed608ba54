"""A small population + FlowRL + QD/novelty/MaxEnt run that checkpoints every step (save_total_limit=1).

Imported by test_checkpoint_crash.py for the uninterrupted and the resumed runs; run as a script it trains the
same run in a subprocess and SIGKILLs itself inside the checkpoint save of step KILL_STEP, at KILL_POINT:
- `after_rotation`: right after transformers rotated the older checkpoints away (the save is not over yet:
  before the fix, divrl wrote its method state files only after this point);
- `method_state`: halfway through writing `divrl_state.pt` (a partial file reaches the disk);
- `optimizer`: halfway through writing the Trainer's `optimizer.pt` (the newest checkpoint has a cut file);
- `manifest`: after transformers' save and rotation, just before divrl writes `divrl_manifest.json`.

    python checkpoint_kill_script.py MODEL_DIR OUTPUT_DIR KILL_POINT KILL_STEP
"""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trainer_helpers import PROMPTS, ToyTask, lora_config, make_config, prompt_dataset  # noqa: E402

MAX_STEPS = 4
TEXTS = ["abc e", "bcd", "xyz", "aeiou", "abc", "qqq", "hello", "xy o", "zzz", "ba", "oa e", "mnop"]


def run(model: Path, out: Path, resume: str | bool | None = None):
    """Train (or resume) the run; returns the trainer."""
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(model)
    args = make_config(out, max_steps=MAX_STEPS, save_strategy="steps", save_steps=1, save_total_limit=1,
                       learning_rate=0.01, qd=True, novelty_coef=0.3, maxent_entropy_target=10.0,
                       maxent_alpha_lr=0.05, flowrl=True, population=True, population_size=2,
                       population_top_m=1, population_interval=2, population_held_prompts=2)
    trainer = DivRLTrainer(str(model), args=args, train_dataset=prompt_dataset(PROMPTS * 2, conversational=True),
                           processing_class=tokenizer, peft_config=lora_config(), task=ToyTask())
    script = lambda prompt, row: TEXTS[(3 * trainer.state.global_step + row) % len(TEXTS)]  # noqa: E731
    with scripted_generation(tokenizer, script):
        trainer.train(resume_from_checkpoint=resume)
    return trainer


def final_state(trainer: Any) -> dict[str, Any]:
    """Everything the run learned: method state, population, log Z head, every member's LoRA weights."""
    return {
        "method": trainer.method_state_dict(),
        "population": trainer.population.state_dict(),
        "log_z": {k: v.detach().clone() for k, v in trainer.log_z_head.state_dict().items()},
        "lora": {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n},
        "step": trainer.state.global_step,
    }


def _install_kill(point: str, step: int) -> None:
    import torch
    import transformers.trainer

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "after_rotation":
        rotate = transformers.trainer.rotate_checkpoints

        def rotate_then_die(output_dir: str, *args: Any, **kwargs: Any) -> None:
            rotate(output_dir, *args, **kwargs)
            if any(p.name == f"checkpoint-{step}" for p in Path(output_dir).iterdir()):
                die()

        transformers.trainer.rotate_checkpoints = rotate_then_die
    elif point == "manifest":
        import divrl.trainers.checkpoint as checkpoint

        write_manifest = checkpoint.write_manifest

        def die_before_the_manifest(folder: str) -> None:
            if folder.endswith(f"checkpoint-{step}"):
                die()
            write_manifest(folder)

        checkpoint.write_manifest = die_before_the_manifest
    elif point in ("method_state", "optimizer"):
        save = torch.save
        target = f"checkpoint-{step}{os.sep}" + ("divrl_state.pt" if point == "method_state" else "optimizer.pt")

        def save_half_then_die(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            name = str(getattr(f, "name", f))
            if target not in name:
                return save(obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            handle = open(name, "wb") if isinstance(f, (str, os.PathLike)) else f
            handle.write(data[: len(data) // 2])
            handle.flush()
            die()

        torch.save = save_half_then_die
    else:
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    model_dir, output_dir, kill_point, kill_step = sys.argv[1:5]
    _install_kill(kill_point, int(kill_step))
    run(Path(model_dir), Path(output_dir))
    raise SystemExit("the run finished: the kill hook never fired")
