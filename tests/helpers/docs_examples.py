"""The documentation's code blocks that claim to run: a ```python block right after a `<!-- runs in tests/... -->`
line in README.md or a docs/ page. Tests read them from the pages, so they run the text a reader copies, not a copy."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = re.compile(r"^<!-- runs in tests/project/test_docs\.py -->\n```python\n(.*?)^```", re.S | re.M)


def documentation_pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def runnable_blocks() -> list[tuple[Path, str]]:
    """(page, code) for every block that claims to run, in page order."""
    return [(page, match.group(1)) for page in documentation_pages()
            for match in RUNNABLE.finditer(page.read_text())]


def runnable_block(page: str) -> str:
    """The one runnable block of docs/<page>."""
    blocks = [code for path, code in runnable_blocks() if path == ROOT / "docs" / page]
    assert len(blocks) == 1, f"docs/{page} holds {len(blocks)} runnable blocks, expected 1"
    return blocks[0]


def run_block(code: str, source: str, namespace: dict) -> None:
    """Run a block as its reader's own file would: in `namespace`, without this test module's `__future__` imports."""
    exec(compile(code, source, "exec", dont_inherit=True), namespace)
