"""divrl as users install it: a wheel built from the checkout, installed without `-e` into a fresh virtual environment,
imports and trains the README's dry run, a shipped recipe by name, from an empty folder (issue 60). The editable install
the suite runs in maps `divrl` onto src/ whatever pyproject.toml lists, so it hid a wheel without `divrl.methods` and
`divrl.backends` (issue 40), and a wheel without the recipes (issue 60)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "divrl"
RECIPES = ROOT / "recipes"
README_DRY_RUN = ["train", "embedded-cpu/hypospace-boolean/ips", "--dry_run", "true"]  # README, "Install ..."


def _modules_of_the_checkout() -> set[str]:
    """Every .py file of src/divrl, as its path inside the wheel."""
    return {path.relative_to(PACKAGE.parent).as_posix() for path in PACKAGE.rglob("*.py")
            if "__pycache__" not in path.parts}


def _run(command: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.slow
def test_the_wheel_installs_without_editable_mode_and_trains_a_dry_run(tmp_path: Path) -> None:
    # Build from a copy of the packaging inputs: setuptools writes build/ and *.egg-info beside its sources, and the
    # checkout is shared. No build isolation, no index: the venv's setuptools, nothing downloaded. The copy follows
    # src/divrl/recipes, the link to recipes/, as an sdist does.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", source / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", source,
          "-w", tmp_path / "wheel"], cwd=tmp_path)
    (wheel,) = (tmp_path / "wheel").glob("divrl-*.whl")
    missing = _modules_of_the_checkout() - set(zipfile.ZipFile(wheel).namelist())
    assert not missing, f"the wheel lacks {sorted(missing)}: list their packages in pyproject.toml"
    recipes = {f"divrl/recipes/{p.relative_to(RECIPES).as_posix()}" for p in RECIPES.rglob("*.yaml")}
    missing = {*recipes, "divrl/recipes/README.md", "divrl/help_index.json"} - set(zipfile.ZipFile(wheel).namelist())
    assert len(recipes) > 100 and not missing, f"the wheel lacks {sorted(missing)[:5]}: see package-data"

    # A fresh venv gets divrl from the wheel only (pip runs for it with --python: its console script then starts
    # the fresh venv's interpreter); the dependencies come from this interpreter's site-packages through a .pth
    # file, added after the install so that pip sees no other divrl. Python does not run the .pth files of a folder
    # listed in a .pth file, so the editable install's finder there stays inactive.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
         cwd=tmp_path)
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path)
                   .strip())
    dependencies = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
    (purelib / "dependencies.pth").write_text("\n".join(dependencies) + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    probe = ("import json, sys, divrl, divrl.backends, divrl.methods, divrl.tasks.hypospace; "
             "print(json.dumps({'files': [m.__file__ for m in (divrl, divrl.backends, divrl.methods, divrl.tasks)], "
             "'path': sys.path}))")
    seen = json.loads(_run([python, "-c", probe], cwd=elsewhere, env=env).splitlines()[-1])
    assert all(Path(f).is_relative_to(purelib) for f in seen["files"]), seen["files"]
    checkout = {ROOT, PACKAGE, ROOT / "src"}
    assert not [p for p in seen["path"] if p and Path(p).resolve() in checkout], seen["path"]

    assert not list(elsewhere.iterdir())
    _run([venv / "bin" / "divrl", *README_DRY_RUN, "--output_dir", "out"], cwd=elsewhere, env=env)
    state = json.loads((elsewhere / "out" / "dry-run" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    _run([venv / "bin" / "divrl", "recipes", "copy", README_DRY_RUN[1]], cwd=elsewhere, env=env)
    assert (elsewhere / "ips.yaml").read_bytes() == (RECIPES / f"{README_DRY_RUN[1]}.yaml").read_bytes()
    # The help reads the index shipped with the installed sources (not the live registry, which imports torch).
    probe = ("import json; from divrl.settings_help import HELP_INDEX, sources_digest; "
             "print(json.loads(HELP_INDEX.read_text())['sources'] == sources_digest())")
    assert _run([python, "-c", probe], cwd=elsewhere, env=env).split()[-1] == "True"

    # The chemical LM ships inside the wheel and loads by its embedded name, from the installed package.
    shipped = {f"divrl/embedded/smiles-clm/{name}" for name in ("model.safetensors", "config.json", "tokenizer.json",
                                                                 "README.md", "divrl_embedded.json")}
    assert shipped <= set(zipfile.ZipFile(wheel).namelist())
    probe = ("import torch; from divrl.models import load_model_and_tokenizer, resolve_model_name; "
             "model, tokenizer = load_model_and_tokenizer('embedded:smiles-clm', cpu=True); "
             "print(resolve_model_name('embedded:smiles-clm')); print(tokenizer('')['input_ids']); "
             "torch.manual_seed(0); ids = model.generate(torch.tensor([[tokenizer.bos_token_id]]), do_sample=True, "
             "max_new_tokens=100); print(tokenizer.decode(ids[0], skip_special_tokens=True))")
    where, prompt, smiles = _run([python, "-c", probe], cwd=elsewhere, env=env).splitlines()[-3:]
    assert Path(where).is_relative_to(purelib) and prompt == "[1]" and smiles
