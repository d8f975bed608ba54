"""mkdocs hook: serve the repository files the pages cite from outside docs/ (BENCHMARKS.md, CHANGELOG.md and the
benchmark figures), so that the strict build checks links to them like links to any page."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"BENCHMARKS.md": "results.md", "CHANGELOG.md": "changelog.md"}  # repository file -> its page in the site
FIGURES = "benchmarks/results"  # served at the same path, so BENCHMARKS.md's own image links resolve


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for source, page in PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    for figure in sorted((ROOT / FIGURES).glob("*.png")):
        files.append(File.generated(config, f"{FIGURES}/{figure.name}", abs_src_path=str(figure)))
    return files
