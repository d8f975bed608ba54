"""`divrl pretrain-clm`: pretrain a small chemical language model on SMILES by maximum likelihood.

The model is a Llama-shaped causal LM of a few million parameters over the atom-level SMILES tokenizer
(`smiles_tokenizer`), the kind of prior REINVENT, Saturn and the IPS paper's molecule experiments start from. The
run is deterministic for a seed (data order depends on the seed and the step alone, the model has no dropout),
prints progress, samples molecules from the model to log their RDKit validity as it trains, checkpoints every few
hundred steps and resumes from its newest checkpoint. The finished model, with its tokenizer and a model card,
loads in `AutoModelForCausalLM` and TRL's `GRPOTrainer` as it is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

CHECKPOINT = "checkpoint"
FINAL = "model"
LOG = "log.jsonl"


@dataclass(frozen=True)
class PretrainConfig:
    """Every setting of a pretraining run; a resume refuses settings that differ from the checkpoint's, except
    `max_steps` (the schedule's length), whose change is recorded."""

    seed: int = 0
    max_steps: int = 6000
    batch_size: int = 128  # molecules per step
    learning_rate: float = 2e-3  # peak, after linear warmup; cosine decay to min_lr_ratio x peak at max_steps
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1  # on weight matrices only
    grad_clip: float = 1.0
    layers: int = 4
    hidden: int = 256
    heads: int = 8
    intermediate: int = 704  # SwiGLU width (~2.75 x hidden)
    max_length: int = 128  # tokens, BOS and EOS included; longer training SMILES are dropped and counted
    length_sort_window: int = 64  # batches per window sorted by length, so a batch pads little (order stays seeded)
    save_every: int = 250
    eval_every: int = 500
    eval_samples: int = 300
    log_every: int = 25

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "warmup_steps", "layers", "hidden", "heads", "intermediate",
                     "max_length", "length_sort_window", "save_every", "eval_every", "eval_samples", "log_every"):
            if getattr(self, name) < 1 and not (name == "warmup_steps" and self.warmup_steps == 0):
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must lie in [0, 1], got {self.min_lr_ratio}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")


def model_config(config: PretrainConfig, tokenizer: PreTrainedTokenizerFast) -> Any:
    """The LlamaConfig of the chemical LM: tied embeddings, RoPE, no dropout, no biases."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden,
        intermediate_size=config.intermediate,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=config.max_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        attention_dropout=0.0,
    )


def learning_rate_at(step: int, config: PretrainConfig) -> float:
    """Linear warmup over `warmup_steps`, then cosine from the peak to `min_lr_ratio` x peak at `max_steps`."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    floor = config.min_lr_ratio
    return config.learning_rate * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def epoch_batches(lengths: np.ndarray, config: PretrainConfig, epoch: int) -> list[np.ndarray]:
    """The batches (index arrays) of one epoch: a seeded permutation, cut into windows of `length_sort_window`
    batches that are sorted by length and split, the window's batches in seeded order. Depends on (seed, epoch)."""
    import numpy as np

    rng = np.random.default_rng([config.seed, epoch])
    order = rng.permutation(len(lengths))
    window = config.batch_size * config.length_sort_window
    batches: list[np.ndarray] = []
    for start in range(0, len(order) - config.batch_size + 1, window):
        chunk = order[start : start + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        cut = [chunk[i : i + config.batch_size] for i in range(0, len(chunk) - config.batch_size + 1,
                                                                config.batch_size)]
        batches.extend(cut[i] for i in rng.permutation(len(cut)))
    return batches


def sample_smiles(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, n: int, seed: int,
                  batch_size: int = 500, temperature: float = 1.0) -> list[str]:
    """`n` SMILES sampled from BOS at `temperature` with no top-k/top-p cut, reproducible for `seed`."""
    import torch

    was_training = model.training
    model.eval()
    out: list[str] = []
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        while len(out) < n:
            count = min(batch_size, n - len(out))
            prompt = torch.full((count, 1), tokenizer.bos_token_id, dtype=torch.long)
            generated = model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=temperature,
                top_k=0, top_p=1.0, max_new_tokens=model.config.max_position_embeddings - 1,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
            )
            out.extend(tokenizer.batch_decode(generated[:, 1:], skip_special_tokens=True))
    model.train(was_training)
    return out


def validity_of(smiles: list[str]) -> tuple[float, float]:
    """(fraction RDKit parses, fraction distinct among the valid, by canonical SMILES)."""
    from divrl.tasks.molecules.chem import canonicalize

    canonical = [canonicalize(s) if s else None for s in smiles]
    valid = [c for c in canonical if c is not None]
    return len(valid) / max(1, len(smiles)), len(set(valid)) / max(1, len(valid))


class Pretraining:
    """One pretraining run in `out`: tokenized corpus, model, optimizer and the step it has reached."""

    def __init__(self, out: Path, config: PretrainConfig, corpus: list[str], source: dict[str, Any],
                 log: Any = print) -> None:
        import numpy as np

        from divrl.tasks.molecules.smiles_tokenizer import build_smiles_tokenizer, check_round_trip, vocabulary

        self.out, self.config, self.source, self.log = Path(out), config, source, log
        self.out.mkdir(parents=True, exist_ok=True)
        saved = self.out / CHECKPOINT
        self.schedule_changes: list[list[int]] = []  # [step, old max_steps, new max_steps] of each resume that moved it
        if (saved / "state.json").is_file():
            state = json.loads((saved / "state.json").read_text())
            changed = sorted(k for k, v in dataclasses.asdict(config).items()
                             if state["config"].get(k) != v and k != "max_steps")
            if changed:
                raise ValueError(f"{saved} was trained with other settings ({', '.join(changed)}); resume with the "
                                 f"same settings (only --max-steps may change) or use a new --out")
            if state["source"]["sha256"] != source["sha256"]:
                raise ValueError(f"{saved} was trained on other data (sha256 {state['source']['sha256'][:12]}...)")
        from transformers import PreTrainedTokenizerFast

        tokenizer_dir = self.out / "tokenizer"
        if (tokenizer_dir / "tokenizer.json").is_file():
            self.tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
        else:
            log(f"building the vocabulary of {len(corpus):,} SMILES and checking every one round-trips")
            self.tokenizer = build_smiles_tokenizer(vocabulary(corpus), model_max_length=config.max_length)
            check_round_trip(self.tokenizer, corpus)
            staging = self.out / ".tokenizer.partial"
            shutil.rmtree(staging, ignore_errors=True)
            self.tokenizer.save_pretrained(staging)
            staging.replace(tokenizer_dir)
        eos = self.tokenizer.eos_token_id
        encoded = [ids + [eos] for ids in self.tokenizer(corpus, add_special_tokens=True)["input_ids"]]
        kept = [ids for ids in encoded if len(ids) <= config.max_length]
        self.dropped = len(encoded) - len(kept)
        if self.dropped:
            log(f"dropped {self.dropped:,} SMILES longer than {config.max_length} tokens")
        if len(kept) < config.batch_size:
            raise ValueError(f"the corpus has {len(kept)} usable SMILES, fewer than one batch ({config.batch_size})")
        self.lengths = np.array([len(ids) for ids in kept], dtype=np.int64)
        self.tokens = np.full((len(kept), int(self.lengths.max())), self.tokenizer.pad_token_id, dtype=np.int64)
        for row, ids in enumerate(kept):
            self.tokens[row, : len(ids)] = ids
        self.batches_per_epoch = len(epoch_batches(self.lengths, config, 0))
        self._epoch_cache: tuple[int, list[np.ndarray]] | None = None
        self._build_model()
        self.step = 0
        self.tokens_seen = 0
        self.elapsed = 0.0
        if (saved / "state.json").is_file():
            self._load(saved)

    def _build_model(self) -> None:
        import torch
        from transformers import LlamaForCausalLM

        torch.manual_seed(self.config.seed)
        self.model = LlamaForCausalLM(model_config(self.config, self.tokenizer))
        self.model.generation_config.update(
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=self.config.max_length - 1,
            bos_token_id=self.tokenizer.bos_token_id, eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.config.learning_rate, betas=(0.9, 0.95), eps=1e-8,
        )

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def batch(self, step: int) -> torch.Tensor:
        """Token ids of the batch at `step`, trimmed to its longest SMILES (padding on the right)."""
        import torch

        epoch, index = divmod(step, self.batches_per_epoch)
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            self._epoch_cache = (epoch, epoch_batches(self.lengths, self.config, epoch))
        rows = self._epoch_cache[1][index]
        return torch.from_numpy(self.tokens[rows, : int(self.lengths[rows].max())])

    def train_step(self) -> float:
        """One optimizer step on the batch at `self.step`; returns the mean token loss."""
        import torch

        ids = self.batch(self.step)
        mask = ids != self.tokenizer.pad_token_id
        labels = ids.masked_fill(~mask, -100)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate_at(self.step, self.config)
        loss = self.model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.step += 1
        self.tokens_seen += int(mask.sum())
        return loss.item()

    def evaluate(self) -> dict[str, float]:
        """Validity and uniqueness of `eval_samples` molecules sampled now (seeded by the step)."""
        smiles = sample_smiles(self.model, self.tokenizer, self.config.eval_samples, seed=self.config.seed + self.step)
        validity, unique = validity_of(smiles)
        return {"validity": validity, "unique_of_valid": unique}

    def save(self) -> None:
        """Write the checkpoint beside the old one, then swap, so a kill at any point leaves one whole checkpoint."""
        import torch

        staging = self.out / f".{CHECKPOINT}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        self.model.save_pretrained(staging)
        torch.save(self.optimizer.state_dict(), staging / "optimizer.pt")
        state = {"step": self.step, "tokens_seen": self.tokens_seen, "elapsed_s": self.elapsed,
                 "config": dataclasses.asdict(self.config), "source": self.source,
                 "schedule_changes": self.schedule_changes}
        (staging / "state.json").write_text(json.dumps(state, indent=2) + "\n")
        target, old = self.out / CHECKPOINT, self.out / f".{CHECKPOINT}.old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)

    def _load(self, saved: Path) -> None:
        import torch
        from safetensors.torch import load_file

        state = json.loads((saved / "state.json").read_text())
        weights = load_file(saved / "model.safetensors")
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if unexpected or any("lm_head" not in name for name in missing):
            raise ValueError(f"{saved} does not hold this model's weights (missing {missing}, extra {unexpected})")
        self.model.tie_weights()
        self.optimizer.load_state_dict(torch.load(saved / "optimizer.pt", weights_only=True))
        self.step, self.tokens_seen, self.elapsed = state["step"], state["tokens_seen"], state["elapsed_s"]
        self.schedule_changes = state.get("schedule_changes", [])
        if state["config"]["max_steps"] != self.config.max_steps:
            if self.step > self.config.max_steps:
                raise ValueError(f"{saved} is at step {self.step:,}, past --max-steps {self.config.max_steps:,}")
            self.schedule_changes.append([self.step, state["config"]["max_steps"], self.config.max_steps])
            self.log(f"max_steps moves from {state['config']['max_steps']:,} to {self.config.max_steps:,} at step "
                     f"{self.step:,}: the cosine decay is recomputed for the new length (recorded in the card)")
        self.log(f"resumed from {saved} at step {self.step:,}")

    def write_log(self, record: dict[str, Any]) -> None:
        with open(self.out / LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def export(self, command: str) -> Path:
        """The finished model, tokenizer and card in `out/model` (written whole, then renamed into place)."""
        staging = self.out / f".{FINAL}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        self.model.save_pretrained(staging)
        self.tokenizer.save_pretrained(staging)
        summary = {
            "parameters": self.parameters, "steps": self.step, "tokens_seen": self.tokens_seen,
            "molecules_seen": self.step * self.config.batch_size, "hours": round(self.elapsed / 3600, 3),
            "config": dataclasses.asdict(self.config), "data": self.source, "command": command,
            "dropped_too_long": self.dropped, "schedule_changes": self.schedule_changes,
        }
        (staging / "pretraining.json").write_text(json.dumps(summary, indent=2) + "\n")
        (staging / "README.md").write_text(model_card(summary))
        target = self.out / FINAL
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target


def model_card(summary: dict[str, Any], metrics: dict[str, Any] | None = None) -> str:
    """The model card (README.md) of a pretrained chemical LM: data and its sha256, steps, tokens, the command and
    hours, and the prior's MOSES metrics when a benchmark has measured them."""
    config, data = summary["config"], summary["data"]
    lines = [
        "---", "license: mit", "library_name: transformers", "tags: [chemistry, smiles, divrl]", "---", "",
        "# smiles-clm: divrl's chemical language model",
        "",
        f"A Llama-shaped causal LM ({summary['parameters']:,} parameters: {config['layers']} layers, hidden "
        f"{config['hidden']}, {config['heads']} heads, SwiGLU {config['intermediate']}, tied embeddings, RoPE, context "
        f"{config['max_length']} tokens) over an atom-level SMILES vocabulary (the Molecular Transformer's regex, "
        "Schwaller et al., ACS Cent. Sci. 2019). Generation starts from `[BOS]` alone: an empty prompt. It is the "
        "kind of prior REINVENT (Blaschke et al., J. Chem. Inf. Model. 2020), Saturn (Guo & Schwaller, "
        "arXiv:2405.17066) and the IPS paper's molecule experiments start reinforcement learning from.",
        "",
        "## Data",
        f"{data['file']}: {data['smiles']:,} SMILES, sha256 `{data['sha256']}` (MOSES, Polykovskiy et al., Front. "
        "Pharmacol. 2020, MIT licence; ZINC clean leads). Test and scaffold-test splits were not used.",
        "",
        "## Training",
        f"Maximum likelihood, {summary['steps']:,} steps of {config['batch_size']} molecules "
        f"({summary['molecules_seen']:,} molecules, {summary['tokens_seen']:,} tokens), AdamW (betas 0.9/0.95, "
        f"weight decay {config['weight_decay']}), peak learning rate {config['learning_rate']} after "
        f"{config['warmup_steps']} warmup steps, cosine to {config['min_lr_ratio']} x peak, seed {config['seed']}; "
        f"{summary['hours']:.2f} h on 2 CPU threads.",
        "",
        f"Command: `{summary['command']}`",
    ]
    for step, old, new in summary.get("schedule_changes", []):
        before = learning_rate_at(step, PretrainConfig(**{**config, "max_steps": old}))
        after = learning_rate_at(step, PretrainConfig(**{**config, "max_steps": new}))
        lines += ["", f"The run was resumed at step {step:,} with --max-steps {new:,} instead of {old:,} (to fit the "
                  f"session's time): from there the cosine decay follows the new length, the learning rate at that "
                  f"step moving from {before:.3g} to {after:.3g}. The data order depends on the seed and step only, "
                  f"so `--max-steps {new}` from scratch sees the same molecules, with a slightly different schedule "
                  "before that step."]
    if metrics:
        lines += ["", "## Prior quality", metrics["text"]]
    return "\n".join(lines) + "\n"


def ship(model_dir: Path, dest: Path, name: str = "smiles-clm") -> Path:
    """Copy a finished model (OUT/model) to `dest` as an embedded model: weights, tokenizer, pretraining summary, its
    model card and the marker that names it (`divrl.models.READY_MARKER`)."""
    from divrl.models import READY_MARKER
    from divrl.tasks.molecules.moses import sha256_file

    model_dir, dest = Path(model_dir), Path(dest)
    if not (model_dir / "pretraining.json").is_file():
        raise ValueError(f"{model_dir} is not a finished pretraining run's model (no pretraining.json)")
    staging = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(model_dir, staging)
    marker = {"name": name, "weights_sha256": sha256_file(staging / "model.safetensors")}
    (staging / READY_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def pretrain(out: Path, config: PretrainConfig, corpus: list[str], source: dict[str, Any], command: str,
             log: Any = print) -> Path:
    """Train (or resume) to `config.max_steps`, then export. Ctrl-C or SIGTERM saves a checkpoint and stops."""
    run = Pretraining(out, config, corpus, source, log=log)
    log(f"chemical LM: {run.parameters:,} parameters, vocabulary {len(run.tokenizer)}, "
        f"{len(run.lengths):,} SMILES ({run.batches_per_epoch:,} steps an epoch); step {run.step:,} of "
        f"{config.max_steps:,}")
    stop = {"signal": None}

    def request_stop(signum: int, _frame: Any) -> None:
        stop["signal"] = signum

    previous = signal.signal(signal.SIGTERM, request_stop)
    window_start, window_tokens, losses = time.monotonic(), 0, []
    try:
        while run.step < config.max_steps and stop["signal"] is None:
            before = run.tokens_seen
            tick = time.monotonic()
            losses.append(run.train_step())
            run.elapsed += time.monotonic() - tick
            window_tokens += run.tokens_seen - before
            if run.step % config.log_every == 0 or run.step == config.max_steps:
                rate = window_tokens / max(1e-9, time.monotonic() - window_start)
                eta = (config.max_steps - run.step) * (time.monotonic() - window_start) / max(1, len(losses))
                record = {"step": run.step, "loss": sum(losses) / len(losses), "lr": learning_rate_at(run.step - 1,
                          config), "tokens_per_s": rate, "tokens_seen": run.tokens_seen, "hours": run.elapsed / 3600}
                log(f"step {run.step:,}/{config.max_steps:,} loss {record['loss']:.4f} lr {record['lr']:.2e} "
                    f"{rate:,.0f} tokens/s epoch {run.step / run.batches_per_epoch:.3f} eta {eta / 60:.0f} min")
                run.write_log(record)
                window_start, window_tokens, losses = time.monotonic(), 0, []
            if run.step % config.eval_every == 0 or run.step == config.max_steps:
                metrics = run.evaluate()
                log(f"step {run.step:,}: validity {metrics['validity']:.3f}, distinct among valid "
                    f"{metrics['unique_of_valid']:.3f} ({config.eval_samples} samples at temperature 1)")
                run.write_log({"step": run.step, **metrics})
                window_start = time.monotonic()
            if run.step % config.save_every == 0:
                run.save()
    except KeyboardInterrupt:
        stop["signal"] = signal.SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)
    if stop["signal"] is not None:
        run.save()
        raise SystemExit(f"stopped at step {run.step:,}; checkpoint saved in {out / CHECKPOINT}: run the same "
                         f"command to resume")
    run.save()
    return run.export(command)


PATH_OPTIONS = {"--out": "RUN", "--ship-to": "DEST", "--data": "SMILES_FILE", "--moses-wheel": "WHEEL"}


def portable_command(argv: list[str]) -> str:
    """The command as typed, with this machine's paths replaced by placeholders (RUN, DEST, ...), for the card."""
    words, placeholder = ["divrl", "pretrain-clm"], None
    for word in argv:
        option, _, value = word.partition("=")
        if placeholder is not None:
            words.append(placeholder)
            placeholder = None
        elif option in PATH_OPTIONS and value:
            words.append(f"{option}={PATH_OPTIONS[option]}")
        else:
            words.append(word)
            placeholder = PATH_OPTIONS.get(word)
    return " ".join(words)


def register(subparsers: Any) -> None:
    """Add `divrl pretrain-clm`."""
    parser = subparsers.add_parser(
        "pretrain-clm",
        help="Pretrain a small chemical language model on SMILES (MOSES train by default).",
        description="Pretrain a Llama-shaped chemical LM by maximum likelihood over an atom-level SMILES tokenizer. "
        "Deterministic for a seed, resumable (run the same command again), logs validity as it trains. The "
        "finished model is in OUT/model.",
    )
    parser.add_argument("--out", type=Path, required=True, help="run folder (checkpoint, log, final model)")
    parser.add_argument("--data", type=Path, default=None,
                        help="SMILES file (CSV with a SMILES column, optionally .gz, or one per line); default: "
                        "MOSES train, downloaded once from PyPI's molsets wheel")
    parser.add_argument("--moses-wheel", type=Path, default=None, help="a local molsets-0.3.1 wheel (offline)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--ship-to", type=Path, default=None,
                        help="after training, copy OUT/model there as an embedded model (maintainers: "
                        "src/divrl/embedded/smiles-clm)")
    defaults = PretrainConfig()
    for field in dataclasses.fields(PretrainConfig):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(getattr(defaults, field.name)),
                            default=getattr(defaults, field.name), help=f"default {getattr(defaults, field.name)}")
    parser.set_defaults(func=_command)


def _command(args: Any) -> int:
    import torch

    from divrl.tasks.molecules.moses import moses_split, read_smiles_file, sha256_file

    config = PretrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(PretrainConfig)})
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    path = args.data if args.data is not None else moses_split("train", args.moses_wheel)
    corpus = read_smiles_file(path)
    source = {"file": "MOSES train (molsets 0.3.1)" if args.data is None else Path(path).name,
              "sha256": sha256_file(Path(path)), "smiles": len(corpus)}
    command = portable_command(sys.argv[2:])
    target = pretrain(args.out, config, corpus, source, command, log=lambda m: print(m, flush=True))
    print(f"ok: chemical LM written to {target}")
    if args.ship_to is not None:
        print(f"ok: shipped as {ship(target, args.ship_to)}")
    return 0
