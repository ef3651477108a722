"""MAGIC (Thomas & Brunskill 2016): a blend of off-policy j-step returns completed by the action-value model.

With self-normalised per-step weights u_{i,t} = w_{i,0:t} / sum_k w_{k,0:t} (u_{i,-1} = 1/N), the j-step
return with the WDR control variate is

    g(j) = sum_{t<=j} g^t sum_i [ u_{i,t} (r_it - Q(s_it, a_it)) + u_{i,t-1} V(s_it) ]
           + g^{j+1} sum_i u_{i,j} V(s_{i,j+1})

for j = -1 (the model alone: the mean V(s_0)) up to T - 1 (WDR). MAGIC returns x . g with x on the
simplex minimising x^T (Omega + b b^T) x, where Omega is the covariance of the g(j) (from the per-episode
terms, the weights' normalisers held fixed) and b(j) the distance of g(j) to a bootstrap interval of
WDR (`bias_level`, `bias_resamples`): a return that leaves WDR's interval is taken to be that biased.

The blend's weights are chosen once on the whole log; bootstrap resamples of the interval reuse them
(choosing them anew per resample would need a bootstrap inside each).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from adwm.evaluation.bootstrap import resample_counts
from adwm.ope.base import Estimator, OPEData, shifted_weights


@dataclass
class Magic(Estimator):
    q_model: str = "fqe"
    bias_level: float = 0.9  # the WDR interval the bias of each j-step return is measured against
    bias_resamples: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        if self.clip is not None and not self.clip > 0:
            raise ValueError(f"{self.name or 'magic'}: clip must be > 0, got {self.clip}")
        if not self.name:
            self.name = "magic" if self.clip is None else f"magic_clip{self.clip:g}"

    def requires(self) -> str:
        return self.q_model

    def _terms(self, data: OPEData) -> tuple[np.ndarray, ...] | None:
        """Per-episode pieces (N, T) of each step: the correction, the baseline and the completion values,
        with the unnormalised weights of each (None where a step has no weight left)."""
        qv = data.q[self.q_model]
        lw = data.cumulative_log_weights(self.clip)
        lw_prev = np.concatenate([np.zeros((data.n, 1)), lw[:, :-1]], axis=1)
        w, w_prev = shifted_weights(lw), shifted_weights(lw_prev)
        if w is None or w_prev is None:
            return None
        v_next = np.concatenate([qv.v[:, 1:], np.zeros((data.n, 1))], axis=1)  # V(s_{t+1}), 0 past the end
        return w, w_prev, data.rewards - qv.q_logged, qv.v, v_next

    def returns(self, data: OPEData, counts: np.ndarray) -> np.ndarray:
        """(B, T + 1) the j-step returns g(-1) .. g(T-1) per row of episode counts (NaN without weight)."""
        terms = self._terms(data)
        if terms is None:
            return np.full((len(counts), data.rewards.shape[1] + 1), np.nan)
        w, w_prev, resid, v, v_next = terms
        disc = data.discounts()
        step = (counts @ (w * resid)) / (counts @ w) + (counts @ (w_prev * v)) / (counts @ w_prev)  # (B, T)
        done = np.cumsum(step * disc, axis=1)  # sum over t <= j
        completion = data.gamma * disc * (counts @ (w * v_next)) / (counts @ w)  # g^{j+1} sum_i u_ij V(s_{i,j+1})
        first = (counts @ v[:, 0])[:, None] / counts.sum(1, keepdims=True)  # g(-1): the mean V(s_0)
        return np.concatenate([first, done + completion], axis=1)

    def blend(self, data: OPEData) -> tuple[np.ndarray, np.ndarray] | None:
        """(x, g): the blend's weights on the simplex and the j-step returns on the whole log."""
        terms = self._terms(data)
        if terms is None:
            return None
        g = self.returns(data, np.ones((1, data.n)))[0]
        if not np.all(np.isfinite(g)):
            return None
        w, w_prev, resid, v, v_next = terms
        disc, n = data.discounts(), data.n
        # per-episode contributions, normalisers fixed: sum over episodes gives g(j)
        per = (w * resid) / w.sum(0) + (w_prev * v) / w_prev.sum(0)
        done = np.cumsum(per * disc, axis=1)
        completion = data.gamma * disc * (w * v_next) / w.sum(0)
        contrib = np.concatenate([v[:, :1] / n, done + completion], axis=1)  # (N, J)
        omega = np.cov(n * contrib, rowvar=False, ddof=1).reshape(len(g), len(g)) / n  # covariance of the means
        counts = resample_counts(n, self.bias_resamples, self.seed)
        wdr = self.returns(data, counts)[:, -1]
        wdr = wdr[np.isfinite(wdr)]
        lo, hi = np.quantile(wdr, [(1 - self.bias_level) / 2, (1 + self.bias_level) / 2]) if len(wdr) else (g[-1],) * 2
        bias = np.maximum(0.0, np.maximum(lo - g, g - hi))
        m = omega + np.outer(bias, bias)
        scale = max(float(np.abs(m).max()), 1e-300)
        m = m / scale
        x0 = np.full(len(g), 1.0 / len(g))
        res = minimize(
            lambda x: x @ m @ x,
            x0,
            jac=lambda x: 2 * m @ x,
            bounds=[(0.0, 1.0)] * len(g),
            constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1.0, "jac": lambda x: np.ones_like(x)}],
            method="SLSQP",
            options={"maxiter": 200, "ftol": 1e-12},
        )
        x = np.clip(res.x, 0.0, None)
        return x / x.sum(), g

    def values(self, data: OPEData, counts: np.ndarray) -> np.ndarray:
        fitted = self.blend(data)
        if fitted is None:
            return np.full(len(counts), np.nan)
        x, _ = fitted
        return self.returns(data, counts) @ x
