"""Population-GRPO overhead: K LoRA members on one base model vs a single LoRA policy (vanilla TRL GRPOTrainer).

Same randomly initialised Qwen3 (hidden 256 x 4 layers by default), LoRA config, data, seeds and GRPO
settings for both, measured like `benchmarks/micro/trainer_overhead.py`: step time = time from `on_step_begin`
to `on_step_end` (generation, loss, backward, optimizer step), as wall time and, on CPU, as the process's
CPU time (single-threaded torch: the work done, little disturbed by other processes on a shared machine;
the goal is judged on it on CPU, on wall time on CUDA); the two trainers alternate
in rounds of `--steps` steps inside one process (first step of every round dropped, the median step of
the rest kept: robust to load spikes on a shared machine); the ratio is the geometric mean over rounds of
the per-round step-time ratio, with a 95% bootstrap interval over rounds.
No selection happens inside the timed steps; the selection phase (scoring every member on the held
prompts, then soup + projection + perturbation + optimizer reset) is timed separately. Peak memory is
measured in fresh subprocesses (one per trainer): peak RSS growth from before the model is loaded to the
end of training plus, for the population, one selection (on CUDA: peak allocated GPU memory); the bytes of
all parameters and of the optimizer state after training are reported too. On CPU torch runs one thread
(`--threads`): on a shared 2-core machine multi-threaded kernels are many times slower and far noisier.
Writes benchmarks/results/population_overhead.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402
from timing import geometric_ratio, interleaved_rounds, step_timer  # noqa: E402

RESULTS = BENCHMARKS / "results"
GOALS = {"step_time_ratio": 1.05, "peak_memory_ratio": 1.2}
PROMPTS = [f"idea {i}: propose a {w} experiment about {t}" for i, (w, t) in enumerate(
    (w, t) for w in ("simple", "bold", "cheap", "careful", "novel", "fast")
    for t in ("molecules", "rings", "numbers", "proofs", "graphs", "memory"))]


def distinct_chars(completions: list, **_: Any) -> list[float]:
    """A reward that varies between random completions (a constant one gives zero advantages)."""
    return [float(len(set(c if isinstance(c, str) else c[-1]["content"]))) for c in completions]


def _datasets(held: int):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": PROMPTS}), Dataset.from_dict({"prompt": PROMPTS[:held]})


def make_trainer(kind: str, model_dir: Path, out: Path, args: argparse.Namespace, callbacks: list) -> Any:
    """A vanilla GRPOTrainer ('single') or a PopulationGRPOTrainer ('population') with identical settings."""
    import torch
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from divrl import DivRLConfig, PopulationGRPOTrainer

    cuda = torch.cuda.is_available()
    common = dict(
        output_dir=str(out / kind), use_cpu=not cuda, bf16=cuda, per_device_train_batch_size=args.batch,
        num_generations=4, max_completion_length=args.completion_length, max_steps=args.steps,
        learning_rate=1e-4, logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True, seed=0,
        activation_checkpointing=False,
        # Every completion has the full length: both trainers do the same work per step whatever their
        # policies learn (otherwise step times follow how often each policy happens to stop early).
        generation_kwargs={"min_new_tokens": args.completion_length},
    )
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0)
    train, held = _datasets(args.held_prompts)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if kind == "single":
        return GRPOTrainer(str(model_dir), reward_funcs=[distinct_chars], args=GRPOConfig(**common),
                           train_dataset=train, processing_class=tokenizer, peft_config=lora, callbacks=callbacks)
    config = DivRLConfig(**common, population_size=args.population_size, population_top_m=args.top_m,
                         population_interval=10**9, population_held_prompts=args.held_prompts)
    return PopulationGRPOTrainer(str(model_dir), reward_funcs=[distinct_chars], args=config, train_dataset=train,
                                 eval_dataset=held, processing_class=tokenizer, peft_config=lora, callbacks=callbacks)


def _rss_kib(field: str) -> int:
    """A memory field of /proc/self/status in KiB (VmRSS = current, VmHWM = peak resident set)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_probe(kind: str, model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """In a fresh process: peak memory growth while building and training one trainer (population: + a selection)."""
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    before = _rss_kib("VmRSS")
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(kind, model_dir, Path(out), args, [])
        trainer.train()
        state_bytes = sum(t.numel() * t.element_size() for s in trainer.optimizer.state.values()
                          for t in s.values() if torch.is_tensor(t))
        param_bytes = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
        if kind == "population":
            trainer.population.run_selection()
    peak = torch.cuda.max_memory_allocated() if cuda else (_rss_kib("VmHWM") - before) * 1024
    return {"peak_bytes": peak, "param_bytes": param_bytes, "optimizer_state_bytes": state_bytes,
            "measure": "peak allocated CUDA memory" if cuda else "peak RSS growth"}


def run_probe(kind: str, model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run `memory_probe` in a subprocess so each trainer's peak is measured from a clean process."""
    command = [sys.executable, __file__, "--probe", kind, "--model-dir", str(model_dir)]
    for name in ("batch", "completion_length", "population_size", "top_m", "held_prompts", "threads"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--steps", str(args.memory_steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"memory probe {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def lora_parameters_at_4b() -> dict[str, float]:
    """Base and per-member LoRA (r=16, all linear) parameter counts of a Qwen3-4B-sized model, built on the
    meta device (no memory): what each extra member costs at that scale."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
    with torch.device("meta"):
        model = get_peft_model(AutoModelForCausalLM.from_config(config),
                               LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    return {"base_params": sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n),
            "lora_params_per_member": lora}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from divrl.testing import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model("qwen3", Path(tmp) / "model", hidden_size=args.hidden_size,
                                     num_layers=args.layers)
        trainers, timers = {}, {}
        for kind in ("single", "population"):
            callback, timers[kind] = step_timer()
            trainers[kind] = make_trainer(kind, model_dir, Path(tmp), args, [callback])
        lengths: dict[str, list[float]] = {"single": [], "population": []}

        def record_lengths(kind: str) -> None:
            lengths[kind] += [h["completions/mean_length"] for h in trainers[kind].state.log_history
                              if "completions/mean_length" in h]

        # The median step of each visit: robust to load spikes on a shared machine.
        times = interleaved_rounds(trainers, timers, args.rounds, statistics.median, after_visit=record_lengths)

        population = trainers["population"].population
        switches = []
        for index in range(50):
            start = time.process_time()
            population.activate_member(index % args.population_size)
            switches.append(time.process_time() - start)
        scoring, soup, errors = [], [], []
        for _ in range(args.selections):
            start = time.perf_counter()
            diversity, max_reward = population.score_members()
            middle = time.perf_counter()
            population.restart_from_soup(diversity, max_reward)
            scoring.append(middle - start)
            soup.append(time.perf_counter() - middle)
            errors.append(population.state.soup_error)
        memory = {kind: run_probe(kind, model_dir, args) for kind in ("single", "population")}

    step_time = {}
    for clock, per_kind in times.items():
        ratio, low, high = geometric_ratio([p / s for p, s in zip(per_kind["population"], per_kind["single"],
                                                                  strict=True)])
        step_time[clock] = {"single_s": statistics.fmean(per_kind["single"]),
                            "population_s": statistics.fmean(per_kind["population"]),
                            "ratio": ratio, "ci95": [low, high], "rounds_s": per_kind}
    single_step = step_time["wall"]["single_s"]
    return {
        "settings": {k: v for k, v in vars(args).items() if k not in ("probe", "model_dir", "quick")},
        "torch_threads": torch.get_num_threads(),
        "step_time": step_time,
        "goal_clock": "wall" if torch.cuda.is_available() else "cpu",
        "mean_completion_length": {kind: statistics.fmean(v) for kind, v in lengths.items()},
        "member_switch_cpu_s": statistics.median(switches),
        "selection": {
            "scoring_s": statistics.median(scoring), "soup_s": statistics.median(soup),
            "scoring_in_single_steps": statistics.median(scoring) / single_step,
            "amortised_overhead": (statistics.median(scoring) + statistics.median(soup))
            / (args.population_size * args.interval * single_step),
            "soup_error": statistics.fmean(errors),
            "generations_scored": args.population_size * args.held_prompts * 4,
        },
        "memory": memory,
        "peak_memory_ratio": memory["population"]["peak_bytes"] / memory["single"]["peak_bytes"],
        "qwen3_4b_analytic": lora_parameters_at_4b(),
        "goals": GOALS,
        "machine": {
            "nproc": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
            "torch": torch.__version__, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "load_average": list(os.getloadavg()),
        },
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }



def markdown(result: dict[str, Any]) -> str:
    s, m, sel, mem = result["settings"], result["machine"], result["selection"], result["memory"]
    big, lengths = result["qwen3_4b_analytic"], result["mean_completion_length"]
    memory_ratio = result["peak_memory_ratio"]
    threads = f", {result['torch_threads']} torch thread(s)" if m["device"] == "cpu" else ""

    def mib(value: float) -> str:
        return f"{value / 2**20:.1f} MiB"

    goal = GOALS["step_time_ratio"]
    rows = []
    for clock, t in result["step_time"].items():
        low, high = t["ci95"]
        judged = clock == result["goal_clock"]
        verdict = "yes" if high <= goal else ("no" if low > goal else "undecided")
        rows.append((f"training step time ({clock})", f"{t['single_s']:.3f} s", f"{t['population_s']:.3f} s",
                     f"{t['ratio']:.3f}x (95% CI {low:.3f}-{high:.3f})", f"<= {goal}x" if judged else "",
                     verdict if judged else ""))
    rows += [
        (f"peak memory ({mem['single']['measure']})", mib(mem["single"]["peak_bytes"]),
         mib(mem["population"]["peak_bytes"]), f"{memory_ratio:.3f}x", f"<= {GOALS['peak_memory_ratio']}x",
         "yes" if memory_ratio <= GOALS["peak_memory_ratio"] else "no"),
        ("parameters (base + adapters)", mib(mem["single"]["param_bytes"]), mib(mem["population"]["param_bytes"]),
         f"{mem['population']['param_bytes'] / mem['single']['param_bytes']:.3f}x", "", ""),
        ("optimizer state", mib(mem["single"]["optimizer_state_bytes"]),
         mib(mem["population"]["optimizer_state_bytes"]),
         f"{mem['population']['optimizer_state_bytes'] / max(mem['single']['optimizer_state_bytes'], 1):.3f}x", "", ""),
    ]
    table = "\n".join(f"| {' | '.join(row)} |" for row in rows)
    return f"""## Population-GRPO overhead (`benchmarks/micro/population_overhead.py`)

K={s['population_size']} LoRA members (r=16, all linear layers) on one randomly initialised Qwen3 (hidden
{s['hidden_size']} x {s['layers']} layers) vs a single LoRA policy trained by vanilla TRL `GRPOTrainer`: same
data, seeds, batch {s['batch']} (4 completions per prompt) of exactly {s['completion_length']} tokens (mean measured:
{lengths['single']:.1f} single, {lengths['population']:.1f} population). Step time:
per optimizer step (generation + loss + backward + optimizer), wall and process CPU time (the goal is judged
on {result['goal_clock']} time), {s['rounds']} interleaved rounds of {s['steps']} steps per trainer (median step of
each round, first step dropped); ratio: geometric mean of per-round ratios, 95% bootstrap interval over rounds. Peak
memory of the population includes one selection phase.

| metric | single policy | population K={s['population_size']} | ratio | goal | met |
|---|---|---|---|---|---|
{table}

Switching the active member (PEFT `set_adapter` + re-enabling every member's gradients), once per step,
costs {1000 * result['member_switch_cpu_s']:.1f} ms of CPU time: a fixed cost per step, independent of the model's
compute.

Selection phase (every K x T steps, not in the step times above): scoring {sel['generations_scored']}
completions ({s['population_size']} members x {s['held_prompts']} held prompts x 4) takes {sel['scoring_s']:.2f} s
(= {sel['scoring_in_single_steps']:.1f} single-policy steps); the exact soup of the top {s['top_m']}, its rank-16
projection (relative truncation error {sel['soup_error']:.3f}), the perturbation and the optimizer reset take
{sel['soup_s']:.3f} s. With a selection every K x T = {s['population_size'] * s['interval']} steps
(T = {s['interval']}), the phase adds {100 * sel['amortised_overhead']:.1f}% to the single-policy training time.

At Qwen3-4B size (parameter counts of the config on the meta device, arithmetic, not measured): base
{big['base_params'] / 1e9:.2f}B parameters, {big['lora_params_per_member'] / 1e6:.1f}M LoRA parameters per member; with
AdamW each member holds weights + two moments: {6 * big['lora_params_per_member'] / 2**20:.0f} MiB in bf16 (QLoRA) or
{12 * big['lora_params_per_member'] / 2**20:.0f} MiB in fp32, so K=5 adds 4x that to a single policy.

Machine: {m['nproc']} cores ({m['cpu']}), {m['device']}{threads}, torch {m['torch']}, Python {m['python']}, load average
{', '.join(f'{x:.1f}' for x in m['load_average'])} at the end (shared machine). Date: {result['date']}.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds per trainer")
    parser.add_argument("--steps", type=int, default=9, help="training steps per round (first one dropped)")
    parser.add_argument("--batch", type=int, default=8, help="completions per step (4 per prompt)")
    parser.add_argument("--completion-length", type=int, default=32)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--population-size", type=int, default=5)
    parser.add_argument("--top-m", type=int, default=3)
    parser.add_argument("--held-prompts", type=int, default=8)
    parser.add_argument("--selections", type=int, default=3, help="timed selection phases (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--memory-steps", type=int, default=6,
                        help="steps of each memory probe (> K, so every member has optimizer state)")
    parser.add_argument("--interval", type=int, default=10,
                        help="T used to amortise the selection phase in the report (the execution-rewards paper: 10)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 3 steps, nothing written")
    parser.add_argument("--probe", choices=("single", "population"), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(args.threads)
    if args.probe:
        print(json.dumps(memory_probe(args.probe, Path(args.model_dir), args)))
        return
    if args.quick:
        args.rounds, args.steps, args.selections = 2, 3, 1
    result = measure(args)
    text = markdown(result)
    print(text)
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "population_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "population_overhead.md").write_text(text)


if __name__ == "__main__":
    main()
