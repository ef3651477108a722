"""Behaviour calibration of simulated values (`evaluate.calibration`).

The behaviour agents that wrote the log are simulated in the world model like
any evaluated policy, and their simulated values J_hat_sim are compared with
their logged values (the mean discounted return of their own episodes in the
log, an on-policy Monte Carlo estimate). The map fitted on those pairs is then
applied to every evaluated policy's J_hat_sim:

* `shift`:  J_hat = J_hat_sim + a, with a the mean of (logged - simulated) over the behaviour agents;
* `affine`: J_hat = a + b * J_hat_sim, ordinary least squares over the behaviour agents (needs two or
  more with different simulated values);
* `none`:   J_hat = J_hat_sim.

It corrects the world model's bias where it is shared by the behaviour agents
and the evaluated ones; it needs the behaviour agents themselves (their configs
in `collect.behaviour`), not only their log-probabilities.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from adwm.data.schema import Episode

CALIBRATIONS = ("none", "shift", "affine")


def check_calibration(method: str) -> None:
    if method not in CALIBRATIONS:
        raise ValueError(f"evaluate.calibration: expected one of {list(CALIBRATIONS)}, got '{method}'")


def logged_values(episodes: Sequence[Episode], gamma: float) -> dict[str, dict]:
    """{policy name: {J, se, n}}: the mean discounted return of each policy's logged episodes."""
    returns: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        returns[ep.policy].append(ep.discounted_return(gamma))
    out = {}
    for name, r in returns.items():
        r = np.asarray(r, dtype=float)
        se = float(r.std(ddof=1) / np.sqrt(len(r))) if len(r) > 1 else float("nan")
        out[name] = {"J": float(r.mean()), "se": se, "n": len(r)}
    return out


def ci_se(ci: Sequence[float], level: float) -> float:
    """Standard error implied by a two-sided interval at `level` (normal approximation)."""
    return float((ci[1] - ci[0]) / (2 * norm.ppf(0.5 + level / 2)))


@dataclass
class Calibration:
    """J = a + b * J_sim, with the standard error of the fitted map at a point (delta method over the
    behaviour agents' logged and simulated standard errors, OLS weights)."""

    method: str
    a: float = 0.0
    b: float = 1.0
    x: np.ndarray | None = None  # behaviour agents' simulated values
    var: np.ndarray | None = None  # per agent: se_logged^2 + b^2 se_sim^2

    def __call__(self, j_sim: float) -> float:
        return self.a + self.b * j_sim

    def se(self, j_sim: float) -> float:
        if self.method == "none":
            return 0.0
        k = len(self.x)
        w = np.full(k, 1.0 / k)
        if self.method == "affine":
            dx = self.x - self.x.mean()
            w = w + (j_sim - self.x.mean()) * dx / float(dx @ dx)
        return float(np.sqrt(w**2 @ self.var))

    def interval(self, j_sim: float, ci_sim: Sequence[float], level: float) -> list[float]:
        """The simulated interval mapped through the calibration and widened, in quadrature, by its error."""
        z, centre = norm.ppf(0.5 + level / 2), self(j_sim)
        lo, hi = sorted((self(ci_sim[0]), self(ci_sim[1])))
        extra = z * self.se(j_sim)
        return [centre - float(np.hypot(centre - lo, extra)), centre + float(np.hypot(hi - centre, extra))]

    def to_dict(self) -> dict:
        return {"method": self.method, "a": self.a, "b": self.b}


def fit_calibration(method: str, sim: dict[str, dict], logged: dict[str, dict], level: float) -> Calibration:
    """Fit the map on the behaviour agents: `sim[name]` = {J_hat_sim, ci_sim} from simulation,
    `logged[name]` = {J, se} from the log."""
    check_calibration(method)
    if method == "none":
        return Calibration("none")
    names = list(sim)
    if not names:
        raise ValueError(f"evaluate.calibration={method}: collect.behaviour lists no behaviour agent to calibrate on")
    x = np.array([sim[n]["J_hat_sim"] for n in names])
    y = np.array([logged[n]["J"] for n in names])
    se_sim = np.array([ci_se(sim[n]["ci_sim"], level) for n in names])
    se_log = np.nan_to_num(np.array([logged[n]["se"] for n in names]))
    if method == "shift":
        a, b = float(np.mean(y - x)), 1.0
    else:
        if len(names) < 2 or np.ptp(x) == 0:
            raise ValueError(
                "evaluate.calibration=affine: needs two or more behaviour agents (collect.behaviour) with "
                f"different simulated values, got {dict(zip(names, x.round(4).tolist()))}; use shift"
            )
        b, a = (float(v) for v in np.polyfit(x, y, 1))
    return Calibration(method, a, b, x, se_log**2 + b**2 * se_sim**2)
