"""Policy families as data: an epsilon family around the evaluated agent plus off-path agents."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from adwm.policies.config import PolicyConfig


@dataclass
class FamilyConfig:
    eps: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])  # the paper's family around `policy`
    off_path: list[PolicyConfig] = field(default_factory=list)  # other checkpoints, temperatures, prompts
    # Opt-in agents appended after off_path (family=eps_offpath_smollm2: SmolLM2, seconds a step on CPU);
    # a separate list, so an experiment that sets its own off_path keeps them
    optional: list[PolicyConfig] = field(default_factory=list)


def family_policies(policy: PolicyConfig, family: FamilyConfig) -> list[PolicyConfig]:
    """Every policy of the family as a config, names unique (`<policy>_eps<eps>` for the eps family)."""
    out = []
    for k, eps in enumerate(family.eps):
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"family.eps[{k}]: expected a value in [0, 1], got {eps}")
        out.append(dataclasses.replace(policy, name=f"{policy.name}_eps{eps:g}", eps=eps))
    out += list(family.off_path) + list(family.optional)
    for p in out:  # simulation and the baselines score an evaluated agent by its model (or none: uniform)
        if p.kind == "heuristic":
            raise ValueError(
                f"family: policy '{p.name}' is a heuristic player (kind=heuristic), which writes behaviour logs "
                "(collect.behaviour) but is not evaluated; evaluated agents are kind=llm or uniform"
            )
    names = [p.name for p in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"family: policy names must be unique; repeated: {dupes}")
    return out
