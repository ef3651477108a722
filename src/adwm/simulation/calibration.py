"""Behaviour calibration of simulated values (`evaluate.calibration`).

The behaviour agents that wrote the log are simulated in the world model like
any evaluated policy, and each one's gap, its logged value (the mean discounted
return of its own episodes in the log, an on-policy Monte Carlo estimate) minus
its simulated value, measures the simulator's bias for that agent. An evaluated
policy's J_hat is its simulated value J_hat_sim plus a weighted mean of the gaps:

* `backbone`: the gaps of the behaviour agents that run the same checkpoint (the
  world model and that checkpoint's projector make the bias an agent reads with);
  the uniform share `eps` of an eps-greedy policy, and a policy whose checkpoint
  no behaviour agent runs, take the mean gap of all behaviour agents;
* `model_share`: the gap is taken as the bias of an agent reading
  the world model, so a behaviour agent's gap is put down to its model share
  `1 - eps` (least squares over the agents on one checkpoint) and the uniform
  share of any policy is left uncalibrated (it reads nothing); a policy whose
  checkpoint no behaviour agent runs takes the mean model-share gap;
* `shift`: the mean gap of all behaviour agents, for every policy;
* `none`: J_hat = J_hat_sim.

It needs the behaviour agents themselves (their configs in `collect.behaviour`),
not only their log-probabilities, and it corrects only a bias the behaviour
agents share with the evaluated ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from adwm.data.schema import Episode
from adwm.evaluation.ground_truth import summarise
from adwm.policies.config import PolicyConfig
from adwm.simulation.config import check_calibration


def logged_values(episodes: Sequence[Episode], gamma: float) -> dict[str, dict]:
    """{policy name: {J, se, n}}: the mean discounted return of each policy's logged episodes."""
    returns: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        returns[ep.policy].append(ep.discounted_return(gamma))
    return {name: summarise(r) for name, r in returns.items()}


def ci_se(ci: Sequence[float], level: float) -> float:
    """Standard error implied by a two-sided interval at `level` (normal approximation)."""
    return float((ci[1] - ci[0]) / (2 * norm.ppf(0.5 + level / 2)))


def _backbone(policy: PolicyConfig) -> str | None:
    """The checkpoint a policy reads with (projectors are per checkpoint); None for a model-free policy."""
    return policy.model if policy.kind == "llm" else None


@dataclass
class Calibration:
    """J_hat = J_hat_sim + sum_i w_i(policy) gap_i over the behaviour agents i."""

    method: str
    behaviour: list[PolicyConfig]
    gaps: np.ndarray  # logged minus simulated value per behaviour agent
    var: np.ndarray  # variance of each gap: se_logged^2 + se_sim^2

    def weights(self, policy: PolicyConfig) -> np.ndarray:
        k = len(self.behaviour)
        if self.method == "none":
            return np.zeros(k)
        overall = np.full(k, 1.0 / k)
        if self.method == "shift":
            return overall
        same = np.array([_backbone(b) is not None and _backbone(b) == _backbone(policy) for b in self.behaviour])
        eps = min(max(policy.eps, 0.0), 1.0)
        if self.method == "backbone":
            return (1 - eps) * same / same.sum() + eps * overall if same.any() else overall
        # model_share: gap_b = s_b g, s_b = 1 - eps_b, fitted by least squares over the matched agents
        share = np.array([0.0 if _backbone(b) is None else 1 - min(max(b.eps, 0.0), 1.0) for b in self.behaviour])
        same &= share > 0
        if same.any():
            return (1 - eps) * same * share / (same * share**2).sum()
        reading = share > 0  # no agent on this checkpoint: the mean of gap_b / s_b over the agents that read
        if _backbone(policy) is None or not reading.any():
            return np.zeros(k)
        return (1 - eps) * reading / np.where(reading, share, 1.0) / reading.sum()

    def offset(self, policy: PolicyConfig) -> float:
        return float(self.weights(policy) @ self.gaps)

    def se(self, policy: PolicyConfig) -> float:
        return float(np.sqrt(self.weights(policy) ** 2 @ self.var))

    def interval(self, policy: PolicyConfig, ci_sim: Sequence[float], level: float) -> list[float]:
        """The simulated interval shifted by the offset and widened, in quadrature, by the offset's error."""
        lo, hi, off = ci_sim[0], ci_sim[1], self.offset(policy)
        extra = norm.ppf(0.5 + level / 2) * self.se(policy)
        centre = (lo + hi) / 2  # widen each side about the interval's own centre, keeping its asymmetry
        return [off + centre - float(np.hypot(centre - lo, extra)), off + centre + float(np.hypot(hi - centre, extra))]

    def to_dict(self) -> dict:
        gaps = {
            b.name: {"gap": float(g), "se": float(np.sqrt(v))} for b, g, v in zip(self.behaviour, self.gaps, self.var)
        }
        return {"method": self.method, "gaps": gaps}


def fit_calibration(
    method: str, behaviour: list[PolicyConfig], sim: dict[str, dict], logged: dict[str, dict], level: float
) -> Calibration:
    """The behaviour agents' gaps: `sim[name]` = {J_hat_sim, ci_sim} from simulation, `logged[name]` =
    {J, se} from the log."""
    check_calibration(method)
    if method == "none":
        return Calibration("none", [], np.zeros(0), np.zeros(0))
    if not behaviour:
        raise ValueError(f"evaluate.calibration={method}: collect.behaviour lists no behaviour agent to calibrate on")
    names = [b.name for b in behaviour]
    gaps = np.array([logged[n]["J"] - sim[n]["J_hat_sim"] for n in names])
    var = np.array([np.nan_to_num(logged[n]["se"]) ** 2 + ci_se(sim[n]["ci_sim"], level) ** 2 for n in names])
    return Calibration(method, list(behaviour), gaps, var)
