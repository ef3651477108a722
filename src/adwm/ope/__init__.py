"""Classic off-policy estimators (the paper's diagnostic baselines), one contract, built by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from adwm.ope.base import Estimate, Estimator, OPEData, QValues
from adwm.ope.doubly_robust import DoublyRobust
from adwm.ope.importance import ImportanceSampling
from adwm.ope.magic import Magic
from adwm.ope.model_based import ModelEstimate

ESTIMATORS: dict[str, Callable[[float | None], Estimator]] = {
    "is": lambda clip: ImportanceSampling(clip=clip),
    "pdis": lambda clip: ImportanceSampling(per_decision=True, clip=clip),
    "wis": lambda clip: ImportanceSampling(weighted=True, clip=clip),
    "wpdis": lambda clip: ImportanceSampling(per_decision=True, weighted=True, clip=clip),
    "dm": lambda clip: ModelEstimate(name="dm", q_model="dm"),
    "dr": lambda clip: DoublyRobust(clip=clip),
    "wdr": lambda clip: DoublyRobust(weighted=True, clip=clip),
    "fqe": lambda clip: ModelEstimate(name="fqe", q_model="fqe"),
    # the world model as the model part (ope/simulated.py): its simulations of the agent from the logged steps
    "adwm_dr": lambda clip: DoublyRobust(name=_named("adwm_dr", clip), clip=clip, q_model="adwm"),
    "adwm_wdr": lambda clip: DoublyRobust(name=_named("adwm_wdr", clip), weighted=True, clip=clip, q_model="adwm"),
    "adwm_magic": lambda clip: Magic(name=_named("adwm_magic", clip), clip=clip, q_model="adwm"),
}
WEIGHTED = ("is", "pdis", "wis", "wpdis", "dr", "wdr", "adwm_dr", "adwm_wdr", "adwm_magic")  # have clipped variants
SIMULATED = "adwm"  # the action values that come from simulating the agent in the world model


def _named(base: str, clip: float | None) -> str:
    return base if clip is None else f"{base}_clip{clip:g}"


def build_estimators(names: Sequence[str], clip: Sequence[float] = (), key: str = "ope.estimators") -> list[Estimator]:
    """The named estimators, plus a clipped variant (`<name>_clip<c>`) of each weighted one per `clip` value."""
    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown:
        raise ValueError(f"{key}: unknown estimator '{unknown[0]}'; choose from {sorted(ESTIMATORS)}")
    out = [ESTIMATORS[n](None) for n in names]
    out += [ESTIMATORS[n](c) for c in clip for n in names if n in WEIGHTED]
    return out


__all__ = [
    "ESTIMATORS",
    "DoublyRobust",
    "Estimate",
    "Estimator",
    "ImportanceSampling",
    "Magic",
    "ModelEstimate",
    "OPEData",
    "QValues",
    "build_estimators",
]
