"""The chemical LM path: the atom-level SMILES tokenizer, MOSES's files, `divrl pretrain-clm` (determinism, resume)
and the molecule task's empty (BOS-only) prompt."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from divrl.tasks.molecules.smiles_tokenizer import (
    BOS,
    EOS,
    SPECIAL_TOKENS,
    build_smiles_tokenizer,
    check_round_trip,
    split_smiles,
    vocabulary,
)

ODD = ["C[C@@H](Cl)c1ccc(Br)cc1", "[NH4+].[Cl-]", "C1CC%10CCC1%10", "c1ccc2c(c1)[nH]c1ccccc12", "C/C=C\\C", "[2H]C#N"]


def test_split_smiles_follows_the_molecular_transformer_regex() -> None:
    assert split_smiles("C[C@@H](Cl)Br") == ["C", "[C@@H]", "(", "Cl", ")", "Br"]
    assert split_smiles("C1CC%10CC1%10") == ["C", "1", "C", "C", "%10", "C", "C", "1", "%10"]
    assert split_smiles("c1ccn[nH]1") == ["c", "1", "c", "c", "n", "[nH]", "1"]
    with pytest.raises(ValueError, match="outside the atom-level SMILES grammar"):
        split_smiles("CC(=O)X")


def test_vocabulary_is_deterministic_and_starts_with_the_special_tokens() -> None:
    tokens = vocabulary(["CCO", "c1ccccc1", "CCl"])
    assert tuple(tokens[:4]) == SPECIAL_TOKENS
    assert tokens[4] == "c" and tokens == vocabulary(["CCl", "c1ccccc1", "CCO"])  # by count, order-free
    with pytest.raises(ValueError, match="special tokens"):
        build_smiles_tokenizer(["C", "O"])


def test_tokenizer_round_trips_and_puts_bos_alone_before_a_smiles(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = build_smiles_tokenizer(vocabulary(ODD))
    assert check_round_trip(tokenizer, ODD) == len(ODD)
    ids = tokenizer("CCl")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and tokenizer.eos_token_id not in ids
    assert tokenizer("")["input_ids"] == [tokenizer.bos_token_id]  # the molecule task's CLM prompt is BOS alone
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.bos_token == BOS and reloaded.eos_token == EOS and reloaded.pad_token_id == 0
    assert reloaded.decode(reloaded(ODD[0])["input_ids"] + [reloaded.eos_token_id], skip_special_tokens=True) == ODD[0]
    with pytest.raises(ValueError, match="unknown token"):
        check_round_trip(tokenizer, ["CCI"])  # iodine is not in this vocabulary


@pytest.mark.slow
def test_a_large_seeded_sample_of_moses_train_round_trips() -> None:
    """The pretraining command checks every training SMILES; the suite checks a seeded 20,000 of them (MOSES train
    comes from PyPI's molsets wheel on first use, checked by sha256, then from the cache)."""
    from divrl.tasks.molecules.moses import moses_split, read_smiles_file

    corpus = read_smiles_file(moses_split("train"))
    assert len(corpus) == 1_584_663
    sample = random.Random(0).sample(corpus, 20_000)
    assert check_round_trip(build_smiles_tokenizer(vocabulary(corpus)), sample) == 20_000


def test_read_smiles_file_takes_moses_csv_and_plain_lists(tmp_path: Path) -> None:
    from divrl.tasks.molecules.moses import read_smiles_file

    csv_gz = tmp_path / "train.csv.gz"
    with gzip.open(csv_gz, "wt") as handle:
        handle.write("SMILES,SPLIT\nCCO,train\nc1ccccc1,train\n")
    assert read_smiles_file(csv_gz) == ["CCO", "c1ccccc1"]
    plain = tmp_path / "mols.smi"
    plain.write_text("CCO id1\n\nCCN\n")
    assert read_smiles_file(plain) == ["CCO", "CCN"]
    empty = tmp_path / "empty.csv"
    empty.write_text("SMILES\nCCO\n\n")
    assert read_smiles_file(empty) == ["CCO"]
    bad = tmp_path / "bad.csv"
    bad.write_text("SMILES,x\nCCO,1\n,2\n")
    with pytest.raises(ValueError, match="row 3 has an empty SMILES"):
        read_smiles_file(bad)


def test_moses_split_refuses_a_wheel_that_is_not_molsets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    from divrl.tasks.molecules import moses

    monkeypatch.setenv("DIVRL_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "molsets-0.3.1-py3-none-any.whl"
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("moses/dataset/data/train.csv.gz", b"not it")
    with pytest.raises(ValueError, match="not the molsets 0.3.1 wheel"):
        moses.moses_split("train", wheel=fake)
    with pytest.raises(ValueError, match="unknown MOSES split"):
        moses.moses_split("valid")


def test_learning_rate_warms_up_then_decays_to_its_floor() -> None:
    from divrl.tasks.molecules.pretrain import PretrainConfig, learning_rate_at

    config = PretrainConfig(max_steps=100, warmup_steps=10, learning_rate=1e-3, min_lr_ratio=0.1)
    assert learning_rate_at(0, config) == pytest.approx(1e-4)
    assert learning_rate_at(9, config) == pytest.approx(1e-3)
    assert learning_rate_at(55, config) == pytest.approx(0.55e-3)  # half way down the cosine
    assert learning_rate_at(100, config) == pytest.approx(1e-4)
    for field, value in (("learning_rate", 0.0), ("batch_size", 0), ("min_lr_ratio", 2.0)):
        with pytest.raises(ValueError, match=field):
            PretrainConfig(**{field: value})


def test_epoch_batches_are_seeded_length_sorted_and_cover_the_epoch() -> None:
    import numpy as np

    from divrl.tasks.molecules.pretrain import PretrainConfig, epoch_batches

    lengths = np.random.default_rng(1).integers(5, 50, size=1000)
    config = PretrainConfig(batch_size=10, length_sort_window=5, seed=3)
    batches = epoch_batches(lengths, config, epoch=0)
    assert len(batches) == 100 and sorted(np.concatenate(batches).tolist()) == list(range(1000))
    assert all(np.array_equal(a, b) for a, b in zip(batches, epoch_batches(lengths, config, 0), strict=True))
    assert not np.array_equal(np.concatenate(batches), np.concatenate(epoch_batches(lengths, config, 1)))
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    assert spread < 15  # a random batch of 10 spans ~37 lengths; sorted windows pad little


TINY = dict(layers=1, hidden=32, heads=2, intermediate=64, batch_size=8, warmup_steps=2, save_every=3,
            eval_every=4, eval_samples=8, log_every=2, max_length=64)


def _corpus() -> list[str]:
    from divrl.tasks.molecules.data import shipped_smiles

    return list(shipped_smiles("chembl")[:200])


def test_pretraining_is_deterministic_resumes_exactly_and_exports_a_loadable_model(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from divrl.tasks.molecules.pretrain import CHECKPOINT, PretrainConfig, pretrain

    corpus, source = _corpus(), {"file": "chembl", "sha256": "abc", "smiles": 200}
    config = PretrainConfig(max_steps=8, **TINY)
    straight = pretrain(tmp_path / "a", config, corpus, source, "cmd", log=lambda _: None)
    # the same run stopped after 4 steps (checkpoint at 3), resumed to 8
    with pytest.raises(SystemExit, match="resume"):
        pretrain(tmp_path / "b", config, corpus, source, "cmd", log=_interrupt_at(4))
    state = json.loads((tmp_path / "b" / CHECKPOINT / "state.json").read_text())
    assert state["step"] == 4  # the interrupt saved where it stopped
    messages: list[str] = []
    resumed = pretrain(tmp_path / "b", config, corpus, source, "cmd", log=messages.append)
    assert any("resumed" in m and "step 4" in m for m in messages)
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    model = AutoModelForCausalLM.from_pretrained(straight)
    tokenizer = AutoTokenizer.from_pretrained(straight)
    assert model.config.model_type == "llama" and tokenizer("")["input_ids"] == [tokenizer.bos_token_id]
    summary = json.loads((straight / "pretraining.json").read_text())
    assert summary["steps"] == 8 and summary["molecules_seen"] == 64 and summary["data"]["sha256"] == "abc"
    log = [json.loads(line) for line in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    assert {"validity", "unique_of_valid"} <= {k for record in log for k in record}
    with pytest.raises(ValueError, match="other settings \\(learning_rate\\)"):
        pretrain(tmp_path / "b", PretrainConfig(max_steps=8, learning_rate=1e-3, **TINY), corpus, source, "cmd",
                 log=lambda _: None)


def _interrupt_at(step: int):
    """A log callback that raises KeyboardInterrupt (as Ctrl-C would) once the progress line of `step` is printed."""

    def log(message: str) -> None:
        if message.startswith(f"step {step}/"):
            raise KeyboardInterrupt

    return log


def test_pretrain_command_refuses_bad_settings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from divrl.cli import main

    assert main(["pretrain-clm", "--out", str(tmp_path), "--learning-rate", "0"]) == 2
    assert "learning_rate must be > 0" in capsys.readouterr().err


def test_an_empty_prompt_asks_for_the_completion_itself() -> None:
    from divrl.tasks.molecules.chem import answer_smiles
    from divrl.tasks.molecules.data import build_rows

    rows = build_rows(3, style="clm")
    assert [row["prompt"] for row in rows] == ["", "", ""] and rows[0]["few_shot"] == []
    assert answer_smiles("OCC", "") == "CCO"
    assert answer_smiles("not a molecule", "") is None
    assert answer_smiles("CCO CCN", "") == "CCO"  # the first token, as after a base prompt's "SMILES:"


def test_a_resume_may_change_the_schedule_length_and_records_it(tmp_path: Path) -> None:
    from divrl.tasks.molecules.pretrain import PretrainConfig, pretrain

    corpus, source = _corpus(), {"file": "chembl", "sha256": "abc", "smiles": 200}
    with pytest.raises(SystemExit):
        pretrain(tmp_path, PretrainConfig(max_steps=10, **TINY), corpus, source, "cmd", log=_interrupt_at(4))
    model = pretrain(tmp_path, PretrainConfig(max_steps=6, **TINY), corpus, source, "cmd", log=lambda _: None)
    summary = json.loads((model / "pretraining.json").read_text())
    assert summary["steps"] == 6 and summary["schedule_changes"] == [[4, 10, 6]]
    assert "resumed at step 4 with --max-steps 6 instead of 10" in (model / "README.md").read_text()
    with pytest.raises(ValueError, match="past --max-steps 3"):
        pretrain(tmp_path, PretrainConfig(max_steps=3, **TINY), corpus, source, "cmd", log=lambda _: None)
