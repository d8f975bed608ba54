"""Method names of the toy backend: GRPO plus components joined by '+' (no torch import: the CLI uses it)."""

from __future__ import annotations

from dataclasses import dataclass

COMPONENTS = ("grpo", "ips", "qd", "maxent", "pop", "fkl", "js", "flowrl", "count", "unlikely", "passk", "clipcov",
              "klcov", "cliphigher", "topentropy")
COVARIANCE_OF = {"clipcov": "clip_cov", "klcov": "kl_cov"}  # component -> DivRLConfig.cov_method
DIVERGENCE_OF = {"fkl": "forward_kl", "js": "js"}  # component -> divrl.core divergence replacing reverse KL


@dataclass(frozen=True)
class Method:
    """GRPO plus the components named in a `+` combination such as `pop+ips+qd`."""

    name: str
    ips: bool = False
    qd: bool = False
    maxent: bool = False
    pop: bool = False
    flowrl: bool = False  # FlowRL's trajectory-balance loss replaces GRPO's clipped surrogate
    count: bool = False  # cross-step outcome-count bonus c / sqrt(1 + n(x, o)) (historical UCB exploration)
    unlikely: bool = False  # unlikeliness reward: r (1 - beta rank / G), rank by the sample's log-prob
    passk: bool = False  # pass@k (best-of-k) advantages replace group normalisation
    cov: str | None = None  # Clip-Cov / KL-Cov on the highest-covariance tokens ('clip_cov' | 'kl_cov')
    # TRL's own levers, as baselines: DAPO's clip-higher (ratio clipped to [1 - clip, 1 + clip_high], TRL's
    # epsilon_high) and the policy gradient on the highest-entropy tokens only (TRL's top_entropy_quantile)
    clip_higher: bool = False
    top_entropy: bool = False
    divergence: str = "reverse_kl"  # regulariser toward the frozen initial policy

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
        covariance = [p for p in parts if p in COVARIANCE_OF]
        if len(covariance) > 1:
            raise ValueError(f"method {name!r} combines clipcov and klcov: choose one")
        divergences = [p for p in parts if p in DIVERGENCE_OF]
        if len(divergences) > 1:
            raise ValueError(f"method {name!r} combines {' and '.join(divergences)}: choose one divergence")
        return cls(name=name.strip(), ips="ips" in parts, qd="qd" in parts, maxent="maxent" in parts,
                   pop="pop" in parts, flowrl="flowrl" in parts, count="count" in parts,
                   unlikely="unlikely" in parts, passk="passk" in parts,
                   cov=COVARIANCE_OF[covariance[0]] if covariance else None,
                   clip_higher="cliphigher" in parts, top_entropy="topentropy" in parts,
                   divergence=DIVERGENCE_OF[divergences[0]] if divergences else "reverse_kl")
