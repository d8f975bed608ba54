"""Write every recipe YAML from one table of models x tasks x methods, so the files never drift apart.

Run `python recipes/generate.py` after changing a setting; tests check the shipped files equal this output.
Each recipe is complete on its own: `accelerate launch -m divrl.train --config FILE` needs nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from divrl.methods import presets_of
from divrl.toy.methods import component_settings

ROOT = Path(__file__).parent

# Task settings: the IPS paper's (appendix B) for HypoSpace; cheap MPO for molecules; the execution-rewards paper's
# ideas.
TASKS: dict[str, dict[str, Any]] = {
    "hypospace-voxel": {"task_args": {"grid": 3, "max_height": 3, "max_blocks": 3}, "instance_limit": 100},
    "hypospace-causal": {"task_args": {"nodes": 4, "max_edges": 6, "observations": [3]}, "instance_limit": 100},
    "hypospace-boolean": {"task_args": {"operators": "extended", "max_depth": 2}, "instance_limit": 78},
    "molecules": {"task_args": {"components": ["qed", "sa", "hbd"]}, "instance_limit": 64},
    "ideas": {"task_args": {"dim": 16}},
    # Countdown (TinyZero's task, many right answers per instance): 3 numbers <= 20, targets with >= 2 solutions
    "countdown": {"task_args": {"count": 3, "max_number": 20, "instances": 200}},
}
# Tasks shipped for some model families only (default: every family): Countdown as the worked example, on the CPU
# and on the Qwen3-4B families that the RL-for-LLM community trains it with.
TASK_FAMILIES: dict[str, tuple[str, ...]] = {"countdown": ("embedded-cpu", "qwen3-4b", "qwen3-4b-vllm")}

# Method settings: each method's name is a `divrl toy` component (`divrl.toy.methods`), whose settings switch its
# registered methods on at their presets (the method files' `preset`) and pick its variant; the rest are the seeds'
# defaults (000 for QD / MaxEnt / population, 001 for IPS, 004 for divergences) and TRL's own levers. MaxEnt's preset
# entropy target is 'auto': it holds the start's entropy (issue 42: H* = 1.0 wrecked warm-started policies).
POPULATION = {**component_settings("pop"), "population_size": 5, "population_top_m": 3, "population_interval": 10}
METHODS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "ips": component_settings("ips"),
    "qd": {**component_settings("qd"), "qd_beta_new": 0.5, "qd_beta_imp": 0.3},
    "maxent": component_settings("maxent"),
    "fkl": {**component_settings("fkl"), "divergence_coef": 0.05},
    "js": {**component_settings("js"), "divergence_coef": 0.05},
    "pop": POPULATION,
    "pop-ips-qd": {**POPULATION, **component_settings("ips"), **component_settings("qd")},
    "count": component_settings("count"),  # historical outcome-count UCB (Song, Kempe & Munos 2025); c: divrl choice
    "unlikely": component_settings("unlikely"),  # Rewarding the Unlikely (He, Fried & Welleck 2025): their beta
    "passk": component_settings("passk"),  # Pass@k Training (Chen et al. 2025), k = half the group of 8 (divrl choice)
    # TRL's own levers, as baselines beside divrl's methods: DAPO's clip-higher (epsilon_high 0.28; on a batch used
    # once the ratio is 1 and no clip binds, so two passes per generation as DAPO's mini-batches) and "Beyond the
    # 80/20 Rule"'s policy loss on the top 20% highest-entropy tokens.
    "clip-higher": {"epsilon_high": 0.28, "num_iterations": 2},
    "top-entropy": {"top_entropy_quantile": 0.2},
    # "The Entropy Mechanism of RL for Reasoning LMs" (Cui et al. 2025): verl's clip_cov / kl_cov defaults; KL-Cov
    # needs a reused batch (two passes over each generation).
    "clip-cov": {**component_settings("clip-cov"), "cov_ratio": 2e-4},
    "kl-cov": {**component_settings("kl-cov"), "cov_ratio": 2e-4, "num_iterations": 2},
    "flowrl": component_settings("flowrl"),  # the IPS paper's baseline (Zhu et al. 2025 defaults: beta 15, clip 0.2)
    # REINVENT's augmented likelihood (sigma 128, Saturn's and the IPS paper's): the molecule designers' baseline
    "reinvent": component_settings("reinvent"),
    # the IPS paper's molecule comparison (its appendix B.2): REINVENT with experience replay from an augmented memory,
    # against IPS-GRPO with the same replay (add the Murcko bucket-10 filter with --task_arg diversity_filter=...)
    # (replay replays texts, so it is no toy component: its settings are its method's preset)
    "reinvent-replay": {**component_settings("reinvent"), **presets_of("replay")},
    "ips-replay": {**component_settings("ips"), **presets_of("replay")},
    "replay": presets_of("replay"),
    "set-diversity": component_settings("set-diversity"),  # SGRPO's leave-one-out set diversity, lambda 0.9
}
# Methods written for one kind of task only (the molecule designers' baselines): method -> the tasks with its recipe.
MOLECULES_ONLY = ("molecules",)
TASK_METHODS: dict[str, tuple[str, ...]] = {name: MOLECULES_ONLY for name in
                                            ("reinvent", "reinvent-replay", "ips-replay", "replay", "set-diversity")}

COMMON: dict[str, Any] = {
    "use_peft": True, "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05,  # the IPS paper appendix B
    "num_generations": 8, "temperature": 1.0, "loss_type": "dapo", "beta": 0.0,
    "logging_steps": 5, "save_steps": 50, "save_total_limit": 3, "report_to": "none", "seed": 42,
}

# LoRA targets where "all-linear" (the IPS paper's choice, divrl's default) would be wrong:
# - Gemma-3-4B-it loads as Gemma3ForConditionalGeneration, whose SigLIP vision tower is linear too: adapt only the
#   language model's decoder projections (the regex also matches text-only Gemma/Qwen, so `--dry_run` works).
GEMMA3_LANGUAGE_LORA = r"model\.(language_model\.)?layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
# - Qwen3-30B-A3B: "all-linear" also reaches the fused expert weights (peft's ParamWrapper, which refuses
#   dropout) and the router `gate`; LoRA on the attention projections only leaves routing and experts intact.
MOE_ATTENTION_LORA = ["q_proj", "k_proj", "v_proj", "o_proj"]
# Methods that cannot run under DeepSpeed ZeRO-3 / FSDP: population copies LoRA weights in place (partitioned
# parameters under ZeRO-3) and FlowRL's log Z head lives outside the sharded model; both refuse at construction.
SHARDED_UNSUPPORTED = ("pop", "pop-ips-qd", "flowrl")

# Generation backends, named in every recipe's header ("# Generation: ...").
HF_GENERATE_4BIT = ("transformers generate, not vLLM: the base is 4-bit NF4, and TRL syncs LoRA weights to vLLM by "
                    "merging the adapter into the base and unmerging it, which a 4-bit base cannot take cleanly "
                    "(dequantise, add, requantise at every sync); the -vllm family is the vLLM variant (bf16 base)")
VLLM_COLOCATE = ("vLLM, colocated on the training GPU (use_vllm, vllm_mode colocate), on a bf16 base: TRL's weight "
                 "sync merges the LoRA adapter into the base, pushes it to vLLM and unmerges it, in bf16 instead of "
                 "requantising a 4-bit base; divrl adds the task's stop_strings to vLLM's `stop` "
                 "(generation_kwargs), so a recipe lists only extra stops there")
HF_GENERATE_ZERO3 = ("transformers generate, not vLLM: a colocated vLLM engine would hold a full bf16 copy of the 30B "
                     "model (~60 GB) beside each GPU's ZeRO-3 shard; for vLLM, serve it on separate GPUs "
                     "(`trl vllm-serve`) and add use_vllm: true, vllm_mode: server")
HF_GENERATE_CPU = "transformers generate (divrl's CPU sampler): vLLM needs a GPU"

# vLLM variants: the 4-bit single-GPU families with a bf16 base and colocated vLLM generation. Every method runs
# with them (population refuses vLLM only on a quantised base, where each member switch would requantise it).
VLLM_SETTINGS: dict[str, Any] = {
    "quantize": "none", "use_vllm": True, "vllm_mode": "colocate",
    "vllm_gpu_memory_utilization": 0.3,  # bf16 4B weights (~8 GB) + KV cache in 30% of a 40 GB GPU
    "vllm_max_model_length": 4096,  # prompt + completion; the model's own limit (40k) would reserve GBs of KV cache
}

# Model families: where they run, how they are loaded and prompted, how they generate, and their batch sizes.
MODELS: dict[str, dict[str, Any]] = {
    "gemma-3-4b-it": {
        "hardware": "1 GPU >= 16 GB", "accelerate_config": "single_gpu.yaml", "generation": HF_GENERATE_4BIT,
        "settings": {"model_name_or_path": "google/gemma-3-4b-it", "quantize": "auto", "dtype": "bfloat16",
                     "bf16": True, "prompt_style": "chat", "per_device_train_batch_size": 8,
                     "gradient_accumulation_steps": 4, "max_completion_length": 256, "learning_rate": 2e-5,
                     "max_steps": 500, "activation_checkpointing": True,
                     "lora_target_modules": GEMMA3_LANGUAGE_LORA},
    },
    "qwen3-4b": {
        "hardware": "1 GPU >= 16 GB", "accelerate_config": "single_gpu.yaml", "generation": HF_GENERATE_4BIT,
        "settings": {"model_name_or_path": "Qwen/Qwen3-4B", "quantize": "auto", "dtype": "bfloat16", "bf16": True,
                     "prompt_style": "chat", "chat_template_kwargs": {"enable_thinking": False},
                     "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
                     "max_completion_length": 256, "learning_rate": 2e-5, "max_steps": 500,
                     "activation_checkpointing": True},
    },
    "qwen3-30b-a3b": {
        "hardware": "8 GPUs >= 80 GB", "accelerate_config": "deepspeed_zero3.yaml", "generation": HF_GENERATE_ZERO3,
        "settings": {"model_name_or_path": "Qwen/Qwen3-30B-A3B", "quantize": "none", "dtype": "bfloat16",
                     "bf16": True, "prompt_style": "chat", "chat_template_kwargs": {"enable_thinking": False},
                     "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
                     "max_completion_length": 256, "learning_rate": 1e-5, "max_steps": 300,
                     "activation_checkpointing": True, "lora_target_modules": MOE_ATTENTION_LORA},
        "tasks": ("hypospace-voxel", "hypospace-causal", "hypospace-boolean"),
        "methods": tuple(m for m in METHODS if m not in SHARDED_UNSUPPORTED),
    },
    "embedded-cpu": {
        "hardware": "CPU, 2+ cores", "accelerate_config": None, "generation": HF_GENERATE_CPU,
        "settings": {"model_name_or_path": "embedded:gemma-3-270m", "quantize": "none", "dtype": "float32",
                     "bf16": False, "use_cpu": True, "prompt_style": "base", "n_exemplars": 3,
                     "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
                     "max_completion_length": 60, "learning_rate": 5e-5, "max_steps": 40,
                     "activation_checkpointing": False,
                     # No LoRA dropout on the CPU: without it the loss forward computes each group's shared prompt
                     # once (exact); with it every row would need its own dropout masks (divrl.backends.cpu).
                     "lora_dropout": 0.0},
        # The small base model rarely writes a valid hypothesis (validity ~1%), so a binary reward gives groups
        # with no signal: pay 0.2 for any readable hypothesis (HypoSpace's documented shaped variant).
        "extra_task_args": {"hypospace": {"format_reward": 0.2},
                            # With three worked examples the base model solves about 1 instance in 100 at numbers up
                            # to 10 (12 test prompts x 8) and none at 20 (8 x 8): the smaller range gives RL a signal
                            "countdown": {"max_number": 10, "instances": 100}},
        # Held-out recovery logged during training (divrl/eval/recovery@n, divrl/eval/validity): 4 test instances x
        # 8 samples before the first step, every 10 steps and at the end. One evaluation samples 32 completions (as
        # many as 4 training steps generate, but stopped at the answer's END line, and with no backward pass).
        "extra_task_settings": {"hypospace": {"recovery_eval": True, "recovery_eval_instances": 4,
                                              "recovery_eval_samples": 8, "eval_steps": 10},
                                # a 3-layer structure on the 3x3 grid is 71 tokens with its END line
                                "hypospace-voxel": {"max_completion_length": 80}},
        "method_overrides": {"pop": {"population_size": 3, "population_top_m": 2, "population_interval": 5},
                             "pop-ips-qd": {"population_size": 3, "population_top_m": 2, "population_interval": 5}},
    },
    # divrl's chemical LM (~3M parameters, shipped): the IPS paper's molecule setting on a prior of its own kind.
    # REINVENT updates every weight, so full fine-tuning (use_peft true makes it LoRA); one empty prompt (BOS alone)
    # and 64 molecules a step, the paper's batch, as one group (64 rows of that prompt: a population holds some out to
    # rank its members); 100 tokens cover MOSES's longest molecule (57 characters).
    "smiles-clm-cpu": {
        "hardware": "CPU, 1+ cores", "accelerate_config": None, "generation": HF_GENERATE_CPU,
        "settings": {"model_name_or_path": "embedded:smiles-clm", "use_peft": False, "quantize": "none",
                     "dtype": "float32", "bf16": False, "use_cpu": True, "prompt_style": "clm",
                     "instance_limit": 64, "per_device_train_batch_size": 64, "num_generations": 64,
                     "gradient_accumulation_steps": 1, "max_completion_length": 100, "learning_rate": 1e-4,
                     "max_steps": 150, "activation_checkpointing": False, "lora_dropout": 0.0},
        "tasks": ("molecules",),
        # a population is K LoRA adapters on one shared base: its members cannot be full fine-tunes
        "method_overrides": {"pop": {**POPULATION, "use_peft": True, "population_size": 3, "population_top_m": 2,
                                     "population_interval": 5},
                             "pop-ips-qd": {**POPULATION, **component_settings("ips"), **component_settings("qd"),
                                            "use_peft": True, "population_size": 3, "population_top_m": 2,
                                            "population_interval": 5}},
    },
}
for _family in ("gemma-3-4b-it", "qwen3-4b"):
    MODELS[f"{_family}-vllm"] = {**MODELS[_family], "hardware": "1 GPU >= 40 GB", "generation": VLLM_COLOCATE,
                                 "settings": {**MODELS[_family]["settings"], **VLLM_SETTINGS}}


def recipe(model: str, task: str, method: str) -> dict[str, Any]:
    """The full settings of one recipe."""
    spec = MODELS[model]
    settings: dict[str, Any] = {"task": task, **TASKS[task], **COMMON, **spec["settings"], **METHODS[method],
                                **spec.get("method_overrides", {}).get(method, {})}
    for prefix, extra in spec.get("extra_task_args", {}).items():
        if task.startswith(prefix):
            settings["task_args"] = {**settings["task_args"], **extra}
    for prefix, extra in spec.get("extra_task_settings", {}).items():
        if task.startswith(prefix):
            settings.update(extra)
    settings["output_dir"] = f"runs/{model}/{task}/{method}"
    return settings


def recipe_paths() -> dict[Path, dict[str, Any]]:
    """Every recipe file and its settings."""
    paths = {}
    for model, spec in MODELS.items():
        for task in spec.get("tasks", TASKS):
            if model not in TASK_FAMILIES.get(task, (model,)):
                continue
            for method in spec.get("methods", METHODS):
                if task in TASK_METHODS.get(method, (task,)):
                    paths[ROOT / model / task / f"{method}.yaml"] = recipe(model, task, method)
    return paths


def render(path: Path, settings: dict[str, Any]) -> str:
    """YAML text of one recipe with a header saying how to run it."""
    model = path.parts[-3]
    config = MODELS[model]["accelerate_config"]
    launch = (f"accelerate launch --config_file accelerate_configs/{config} -m divrl.train --config " if config
              else "divrl train ")
    header = (f"# Generated by recipes/generate.py: edit the table there, not this file.\n"
              f"# Hardware: {MODELS[model]['hardware']}\n"
              f"# Generation: {MODELS[model]['generation']}\n"
              f"# Run: {launch}{path.relative_to(ROOT.parent)}\n")
    return header + yaml.safe_dump(settings, sort_keys=False)


def main() -> None:
    """Write every recipe and delete recipe files the table no longer has."""
    paths = recipe_paths()
    for stale in set(ROOT.glob("*/*/*.yaml")) - set(paths):
        stale.unlink()
        print(f"removed {stale.relative_to(ROOT.parent)} (no longer in the table)")
    for path, settings in paths.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(path, settings))
    print(f"wrote {len(paths)} recipes under {ROOT}")


if __name__ == "__main__":
    main()
