"""Method names of the toy backend: GRPO plus components joined by '+' (no torch import: the CLI uses it).

A component is a label of `divrl toy --methods`; the toy runner maps the labels onto `DivRLConfig` fields in one place
(`divrl.toy.runner._method_args`), so the method files own the knobs and this module only parses names."""

from __future__ import annotations

from dataclasses import dataclass

# grpo: plain GRPO; ips, qd, maxent (entropy target + novelty + length bins), count, unlikely, passk, clipcov, klcov:
# the divrl methods; fkl / js: the divergence replacing reverse KL; pop: the population; flowrl: FlowRL's
# trajectory-balance loss instead of GRPO's surrogate; cliphigher / topentropy: TRL's own levers (DAPO's
# clip-higher, the policy gradient on the highest-entropy tokens) as baselines.
COMPONENTS = ("grpo", "ips", "qd", "maxent", "pop", "fkl", "js", "flowrl", "count", "unlikely", "passk", "clipcov",
              "klcov", "cliphigher", "topentropy")
COVARIANCE_OF = {"clipcov": "clip_cov", "klcov": "kl_cov"}  # component -> DivRLConfig.cov_method
DIVERGENCE_OF = {"fkl": "forward_kl", "js": "js"}  # component -> divrl.core divergence replacing reverse KL


@dataclass(frozen=True)
class Method:
    """GRPO plus the components named in a `+` combination such as `pop+ips+qd`; `"ips" in method` asks for one."""

    name: str
    components: frozenset[str] = frozenset()

    def __contains__(self, component: object) -> bool:
        return component in self.components

    def choice(self, labels: dict[str, str]) -> str | None:
        """The value `labels` gives this method's one component among its keys (None when it has none)."""
        return next((value for label, value in labels.items() if label in self.components), None)

    @classmethod
    def parse(cls, name: str) -> Method:
        """Parse `a+b+...`; raises ValueError listing the valid components on anything unknown."""
        parts = [p.strip() for p in name.strip().split("+")]
        unknown = [p for p in parts if p not in COMPONENTS]
        if unknown or not name.strip():
            raise ValueError(f"unknown method component(s) {unknown or [name]} in {name!r}; "
                             f"valid: {', '.join(COMPONENTS)} (combine with '+', e.g. pop+ips+qd)")
        if len(set(parts)) != len(parts):
            raise ValueError(f"method {name!r} repeats a component")
        if len(set(parts) & COVARIANCE_OF.keys()) > 1:
            raise ValueError(f"method {name!r} combines clipcov and klcov: choose one")
        divergences = [p for p in parts if p in DIVERGENCE_OF]
        if len(divergences) > 1:
            raise ValueError(f"method {name!r} combines {' and '.join(divergences)}: choose one divergence")
        return cls(name=name.strip(), components=frozenset(parts))
