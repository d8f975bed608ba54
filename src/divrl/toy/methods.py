"""Method names of the toy backend: GRPO plus components joined by '+' (no torch import at module level: the CLI
lists the labels before anything trains).

A component label is a word of `recipes/generate.py`'s method table: it switches registered divrl methods on at their
presets (`divrl.methods.presets_of`), plus the settings that pick its variant. A registered method with a preset and
no label here is a component under its registry name ('_' written '-'), so a new method file needs nothing in the toy.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Component:
    """A `--methods` label: the registered divrl methods it switches on (at their presets) and the `DivRLConfig`
    values that pick its variant; no methods: plain GRPO, or one of TRL's own levers the toy mirrors."""

    methods: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)


# grpo: plain GRPO; maxent: entropy target + novelty + length bins; fkl / js: the divergence replacing reverse KL;
# pop: the population; flowrl: FlowRL's trajectory-balance loss instead of GRPO's surrogate; clip-higher / top-entropy:
# TRL's own levers (DAPO's clip-higher, the policy gradient on the highest-entropy tokens) as baselines.
LABELLED: dict[str, Component] = {
    "grpo": Component(),
    "ips": Component(("ips",)),
    "qd": Component(("qd",)),
    "maxent": Component(("maxent_entropy", "novelty", "length_bins")),
    "pop": Component(("population",)),
    "fkl": Component(("divergence",), {"divergence": "forward_kl"}),
    "js": Component(("divergence",)),
    "flowrl": Component(("flowrl",)),
    "count": Component(("count_bonus",)),
    "unlikely": Component(("unlikeliness",)),
    "passk": Component(("passk",)),
    "clip-cov": Component(("cov",), {"cov_method": "clip_cov"}),
    "kl-cov": Component(("cov",), {"cov_method": "kl_cov"}),
    "clip-higher": Component(),
    "top-entropy": Component(),
}
# Labels renamed to the recipes' words; the old ones still work, with a warning, for a release.
DEPRECATED_COMPONENTS: dict[str, str] = {"clipcov": "clip-cov", "klcov": "kl-cov", "cliphigher": "clip-higher",
                                         "topentropy": "top-entropy"}
_warned: set[str] = set()


def components() -> dict[str, Component]:
    """Every component: the labelled ones, then each registered method with a preset that no label switches on."""
    from divrl.methods import REGISTRY

    labelled = {name for component in LABELLED.values() for name in component.methods}
    derived = {method.name.replace("_", "-"): Component((method.name,)) for method in REGISTRY.values()
               if method.preset and method.runs_on_toy and method.name not in labelled}
    return {**LABELLED, **derived}


def canonical(label: str) -> str:
    """`label`, or the label a deprecated one was renamed to (saying so on stderr, once per label)."""
    if label not in DEPRECATED_COMPONENTS:
        return label
    new = DEPRECATED_COMPONENTS[label]
    if label not in _warned:
        _warned.add(label)
        print(f"divrl toy: method component {label!r} is deprecated, use {new!r} (the recipes' name)", file=sys.stderr)
    return new


@dataclass(frozen=True)
class Method:
    """GRPO plus the components named in a `+` combination such as `pop+ips+qd`; `"ips" in method` asks for one."""

    name: str
    components: frozenset[str] = frozenset()

    def __contains__(self, component: object) -> bool:
        return DEPRECATED_COMPONENTS.get(component, component) in self.components  # type: ignore[call-overload]

    def variants(self) -> dict[str, Any]:
        """The `DivRLConfig` values its components pick their variants with (fkl: forward KL), over any other."""
        table = components()
        return {name: value for label in self.components for name, value in table[label].settings.items()}

    def switched(self) -> set[str]:
        """The registered methods its components switch on."""
        table = components()
        return {name for label in self.components for name in table[label].methods}

    @classmethod
    def parse(cls, name: str) -> Method:
        """Parse `a+b+...`; raises ValueError listing the valid components on anything unknown."""
        table = components()
        parts = [canonical(p.strip()) for p in name.strip().split("+")]
        unknown = [p for p in parts if p not in table]
        if unknown or not name.strip():
            raise ValueError(f"unknown method component(s) {unknown or [name]} in {name!r}; "
                             f"valid: {', '.join(table)} (combine with '+', e.g. pop+ips+qd)")
        if len(set(parts)) != len(parts):
            raise ValueError(f"method {name!r} repeats a component")
        for method in {m for p in parts for m in table[p].methods}:
            rivals = [p for p in parts if method in table[p].methods]
            if len(rivals) > 1:
                raise ValueError(f"method {name!r} combines {' and '.join(rivals)}: choose one")
        return cls(name=name.strip(), components=frozenset(parts))


def component_settings(label: str) -> dict[str, Any]:
    """The `DivRLConfig` values that switch component `label` on: its methods' presets, then its variant's values
    (what `recipes/generate.py` writes for the method of that name)."""
    from divrl.methods import presets_of

    component = components()[label]
    return {**presets_of(*component.methods), **component.settings}
