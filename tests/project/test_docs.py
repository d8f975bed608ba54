"""The documentation (issue 59): the site builds strictly (a broken link or a missing page fails the build), the code
blocks that claim to run do, and every repository path and `divrl.*` name that README.md and the pages cite exists."""

from __future__ import annotations

import glob
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docs_examples import ROOT, documentation_pages, run_block, runnable_blocks
from trainer_helpers import PROMPTS, ToyTask, prompt_dataset

MKDOCS = Path(sys.executable).with_name("mkdocs")
# The objects the API reference documents, by the anchor mkdocstrings gives each.
API_OBJECTS = ("divrl.trainers.config.DivRLConfig", "divrl.trainers.divrl_trainer.DivRLTrainer", "divrl.task.Task",
               "divrl.methods.base.Method")
# The history page reproduces replaced benchmark fragments verbatim: they name each script where it was when it ran
# (benchmarks/README.md says where the moved ones are now), so its paths are a record, not a citation to check.
HISTORY_PAGE = ROOT / "docs" / "benchmarks-history.md"
CITING_PAGES = [*(page for page in documentation_pages() if page != HISTORY_PAGE), ROOT / "CHANGELOG.md"]
CODE_SPAN = re.compile(r"`([^`\n]+)`")
DOTTED_NAME = re.compile(r"(?<![\w./-])divrl(?:\.[A-Za-z_]\w*)+")
# How the pages abbreviate repository folders: `divrl/task.py` is the package's file, `results/x.md` a benchmark's.
ABBREVIATIONS = {"divrl": "src/divrl", "results": "benchmarks/results"}


def _mkdocs(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([str(MKDOCS), *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_the_site_builds_strictly_with_its_api_reference(tmp_path: Path) -> None:
    result = _mkdocs("build", "--strict", "--site-dir", str(tmp_path / "site"))
    assert result.returncode == 0, result.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert all(f'id="{name}"' in api for name in API_OBJECTS), "the API reference lacks an object"


def test_a_broken_link_fails_the_sites_own_settings(tmp_path: Path) -> None:
    """mkdocs.yml's own validation settings (strict, links), on a one-page site whose page links to a missing one."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    del config["hooks"], config["nav"]
    config.update(docs_dir=str(tmp_path / "docs"), site_dir=str(tmp_path / "site"), plugins=["search"])
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = _mkdocs("build", "--config-file", str(tmp_path / "mkdocs.yml"))
    assert result.returncode != 0 and "missing.md" in result.stderr


def test_the_blocks_that_claim_to_run_do(tiny_qwen3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block runs as written, given what its text says the reader supplies: a model, a dataset and a task."""
    from divrl.methods import REGISTRY

    blocks = runnable_blocks()
    assert any(page.name == "add-a-method.md" for page, _ in blocks), "the Add a method example is not marked"
    monkeypatch.chdir(tmp_path)  # blocks write under relative output dirs
    for page, code in blocks:
        registered = set(REGISTRY)
        namespace = {"__name__": f"docs_{page.stem}", "model": str(tiny_qwen3), "task": ToyTask(),
                     "dataset": prompt_dataset(PROMPTS)}
        try:
            run_block(code, str(page), namespace)
        finally:
            for name in set(REGISTRY) - registered:
                REGISTRY.pop(name)


def _cited_paths(text: str) -> set[str]:
    """Repository paths in the text's code spans and Markdown links, abbreviations expanded and {a,b} spelled out."""
    tokens = [token for span in CODE_SPAN.findall(text) for token in re.split(r"[\s=]+", span)]
    tokens += re.findall(r"\]\(([^)#\s]+)", text)
    top_level = {entry.name for entry in ROOT.iterdir()} | set(ABBREVIATIONS)
    paths = set()
    for token in tokens:
        token = token.strip(".,;:()'\"")
        head = token.split("/", 1)[0]
        if "/" not in token or head not in top_level or (head in ABBREVIATIONS and "." not in token):
            continue  # a command, a run's output (OUTPUT_DIR/..., runs/...), a URL, a metric (divrl/task_reward)
        token = ABBREVIATIONS.get(head, head) + token[len(head):]
        braces = re.search(r"\{([^}]*)\}", token)
        choices = braces.group(1).split(",") if braces else [""]
        paths |= {token.replace(braces.group(0), c) if braces else token for c in choices}
    return paths


def test_every_cited_repository_path_exists() -> None:
    """Paths in code spans and links of README.md, docs/ and CHANGELOG.md; page-relative links inside docs/ are the
    strict build's to check."""
    missing, checked = [], 0
    for page in CITING_PAGES:
        text = page.read_text()
        if page.parent != ROOT:
            text = re.sub(r"\]\([^)]*\)", "]", text)  # the site's links, relative to the page
        paths = _cited_paths(text)
        checked += len(paths)
        missing += [f"{page.relative_to(ROOT)}: {path}" for path in sorted(paths) if not glob.glob(str(ROOT / path))]
    assert checked > 50, f"the pages cite many repository paths; the pattern found {checked}"
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def _resolves(name: str) -> bool:
    """Whether the dotted name is a module, or an attribute reached from the longest importable module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_cited_divrl_name_exists() -> None:
    names = {(page.relative_to(ROOT), name) for page in CITING_PAGES for name in DOTTED_NAME.findall(page.read_text())}
    assert len(names) > 10, "the pages cite divrl's names; the pattern found almost none"
    missing = sorted(f"{page}: {name}" for page, name in names if not _resolves(name))
    assert not missing, "cited but not importable:\n" + "\n".join(missing)
