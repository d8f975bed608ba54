"""divrl overrides TRL's private GRPOTrainer hooks, so TRL is bounded to the minor version the suite ran with."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
TESTED_TRL_MINOR = (1, 16)  # raise together with the bound in pyproject.toml and the README, after the suite passes


def _trl_dependency() -> str:
    """The trl entry of pyproject.toml's dependencies (read as text: tomllib needs Python 3.11)."""
    found = re.findall(r'^\s*"(trl\b[^"]*)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert len(found) == 1, found
    return found[0]


def _trl_requirement() -> Requirement:
    return Requirement(_trl_dependency())


def test_trl_is_bounded_to_the_tested_minor_version() -> None:
    specifier = _trl_requirement().specifier
    major, minor = TESTED_TRL_MINOR
    assert f"{major}.{minor}.0" in specifier and f"{major}.{minor}.99" in specifier
    assert f"{major}.{minor + 1}.0" not in specifier, "no upper bound: a new TRL minor may change the private hooks"
    assert f"{major}.{minor - 1}.99" not in specifier


def test_installed_trl_is_the_tested_minor_version() -> None:
    installed = Version(version("trl"))
    assert (installed.major, installed.minor) == TESTED_TRL_MINOR
    assert installed in _trl_requirement().specifier


def test_readme_states_the_bound() -> None:
    assert f"`{_trl_dependency()}`" in (ROOT / "README.md").read_text()
