"""Golden numbers of every method before the method-registry redesign (issue 30): each method alone and three
compositions train 2 steps of the tiny test model on scripted completions with fixed seeds, one torch thread, and
record what the redesign must reproduce: rewards after shaping, advantages, loss, gradient norm, the logged metric
names and the method state.

    python tests/helpers/golden_methods.py        # (re)write tests/golden/methods.json from the current code
    python tests/helpers/golden_methods.py NAME   # record only case NAME (a new method's), keeping the others

`tests/methods/test_golden_methods.py` compares the current code with the file: floats within `close.REL_TOL` (kernel
paths differ by CPU in the last bits, see tests/helpers/close.py), everything else exactly.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from trainer_helpers import PROMPTS, ToyTask, lora_config, make_config, prompt_dataset  # noqa: E402

GOLDEN = Path(__file__).parents[1] / "golden" / "methods.json"
TEXTS = ["abc e", "bcd", "xyz", "aeiou", "abc", "qqq", "hello", "xy o", "zzz", "ba", "oa e", "mnop"]
POPULATION = {"population": True, "population_size": 2, "population_top_m": 1, "population_interval": 1,
              "population_held_prompts": 2}
CASES: dict[str, dict[str, Any]] = {
    "grpo": {},
    "ips": {"ips": True},
    "ips-semantic": {"ips": True, "ips_outcome_key": "semantic"},
    "count": {"count_bonus_coef": 0.5},
    "unlikeliness": {"unlikeliness_beta": 0.25},
    "passk": {"passk": 2},
    "qd": {"qd": True},
    "maxent-entropy": {"maxent_entropy_target": 1.0},
    "novelty": {"novelty_coef": 0.3},
    "length-bins": {"length_bins": 2},
    "clip-cov": {"cov_method": "clip_cov", "cov_ratio": 0.2},
    "kl-cov": {"cov_method": "kl_cov", "cov_ratio": 0.2, "num_iterations": 2},
    "forward-kl": {"divergence": "forward_kl", "divergence_coef": 0.1},
    "js": {"divergence": "js", "divergence_coef": 0.1},
    "alpha": {"divergence": "alpha", "divergence_coef": 0.1, "divergence_alpha": 0.5},
    "zero-flat-groups": {"zero_flat_groups": True},
    "flowrl": {"flowrl": True},
    "population": POPULATION,
    "pop+ips+qd": {**POPULATION, "ips": True, "qd": True},
    "fkl+count+unlikeliness": {"divergence": "forward_kl", "divergence_coef": 0.1, "count_bonus_coef": 0.5,
                               "unlikeliness_beta": 0.25},
    "flowrl+ips": {"flowrl": True, "ips": True},
    "reinvent": {"reinvent": True, "reinvent_sigma": 2.0},
    "reinvent+ips": {"reinvent": True, "reinvent_sigma": 2.0, "ips": True},
    "set-diversity": {"set_diversity_coef": 0.9},
    "replay": {"replay": True, "replay_samples": 2, "replay_memory_size": 4},
    "reinvent+replay": {"reinvent": True, "reinvent_sigma": 2.0, "replay": True, "replay_samples": 2},
}


def _plain(value: Any) -> Any:
    """Tensors and containers as JSON values (floats exact: Python floats round-trip through JSON)."""
    import torch

    if isinstance(value, torch.Tensor):
        return _plain(value.detach().double().tolist())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value != value:
        return "nan"
    return value


def run_case(model: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Two scripted steps of one case; what the redesign must reproduce."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    torch.set_num_threads(1)  # one reduction order: bit-reproducible on one machine's kernels
    steps: list[dict[str, Any]] = []
    holder: dict[str, Any] = {}

    class Record(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            logs = holder["trainer"]._logs
            steps.append({"rewards": {k: list(v) for k, v in logs["rewards"].items()},
                          "advantages": list(logs["advantages"])})

    tokenizer = AutoTokenizer.from_pretrained(model)
    with tempfile.TemporaryDirectory() as out:
        args = make_config(Path(out), max_steps=2, per_device_train_batch_size=8, max_completion_length=6,
                           learning_rate=0.01, **settings)
        trainer = DivRLTrainer(str(model), args=args, train_dataset=prompt_dataset(PROMPTS * 2),
                               processing_class=tokenizer, peft_config=lora_config(), task=ToyTask(),
                               callbacks=[Record()])
        holder["trainer"] = trainer
        script = lambda prompt, row: TEXTS[(5 * trainer.state.global_step + row) % len(TEXTS)]  # noqa: E731
        with scripted_generation(tokenizer, script):
            trainer.train()
    history = [entry for entry in trainer.state.log_history if "loss" in entry]
    state = {"method": trainer.method_state_dict(),
             "population": trainer.population.state_dict() if settings.get("population") else None,
             # FlowRL's head and every member's LoRA weights: too large to keep whole, so each tensor's shape and norm
             "log_z": _norms(trainer.log_z_head.state_dict()) if settings.get("flowrl") else None,
             "lora": _norms({n: p for n, p in trainer.model.named_parameters() if "lora_" in n})}
    return {"steps": steps, "loss": [e["loss"] for e in history], "grad_norm": [e["grad_norm"] for e in history],
            "metrics": sorted({key for entry in history for key in entry}), "method_state": _plain(state)}


def _norms(tensors: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each tensor's shape (exact) and L2 norm (a float compared with tolerance, unlike a digest of the values,
    which changes with the last bit of any one of them)."""
    return {name: {"shape": list(t.shape), "norm": t.detach().double().norm().item()} for name, t in tensors.items()}


def record(model: Path) -> dict[str, Any]:
    """Every case's numbers, as JSON values."""
    return {name: _plain(run_case(model, dict(settings))) for name, settings in CASES.items()}


if __name__ == "__main__":
    from divrl.testing import build_tiny_model

    only = sys.argv[1:]  # case names: record those only (a new method's), keeping every other case as recorded
    unknown = sorted(set(only) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    with tempfile.TemporaryDirectory() as folder:
        tiny = build_tiny_model("qwen3", Path(folder) / "tiny-qwen3")
        GOLDEN.parent.mkdir(exist_ok=True)
        if only:
            numbers = json.loads(GOLDEN.read_text())
            numbers.update({name: _plain(run_case(tiny, dict(CASES[name]))) for name in only})
        else:
            numbers = record(tiny)
        GOLDEN.write_text(json.dumps(numbers, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}" + (f" ({', '.join(only)})" if only else ""))
