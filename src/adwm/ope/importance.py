"""Importance-sampling estimators: trajectory IS, per-decision IS, and their weighted forms.

With w_{i,0:t} = prod_{k<=t} pi_e(a_k|s_k) / pi_b(a_k|s_k) and discount g^t (Precup et al. 2000):

    IS    = 1/N sum_i w_{i,0:T} G_i                 G_i = sum_t g^t r_it
    PDIS  = 1/N sum_i sum_t g^t w_{i,0:t} r_it
    WIS   = sum_i w_{i,0:T} G_i / sum_i w_{i,0:T}
    WPDIS = sum_t g^t sum_i w_{i,0:t} r_it / sum_i w_{i,0:t}

The unnormalised forms are computed from log-weights with signed
log-sum-exp, so ratios of hundreds of nats neither overflow nor warn; an
estimate too large for a float is NaN flagged 'overflow'. The self-normalised
forms are invariant to the weights' scale and use weights shifted so that the
largest is 1 (`base.shifted_weights`). `clip` caps every cumulative weight (a
named variant, e.g. `wis_clip100`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adwm.ope.base import Estimator, OPEData, episode_sums, shifted_weights, signed_exp, signed_log, signed_log_sum


@dataclass
class ImportanceSampling(Estimator):
    per_decision: bool = False
    weighted: bool = False

    def __post_init__(self) -> None:
        if self.clip is not None and not self.clip > 0:
            raise ValueError(f"{self.name or 'importance sampling'}: clip must be > 0, got {self.clip}")
        if not self.name:
            base = ("w" if self.weighted else "") + ("pdis" if self.per_decision else "is")
            self.name = base if self.clip is None else f"{base}_clip{self.clip:g}"

    def values(self, data: OPEData, counts: np.ndarray) -> np.ndarray:
        lw = data.cumulative_log_weights(self.clip)  # (N, T)
        disc = data.discounts()
        support, _ = episode_sums(lw[:, -1], np.ones(data.n), counts)  # (B,) log sum of trajectory weights
        if self.per_decision and self.weighted:
            w = shifted_weights(lw)
            if w is None:
                return np.full(len(counts), np.nan)
            value = ((counts @ (w * data.rewards)) / (counts @ w)) @ disc  # per-step weighted mean rewards
        else:
            if self.per_decision:  # per-episode sum_t g^t w_t r_t, in log space
                la, sg = signed_log_sum(lw + signed_log(data.rewards * disc)[0], np.sign(data.rewards), axis=-1)
            else:
                la, sg = signed_log(data.rewards @ disc)
                la = lw[:, -1] + la
            s, sign = episode_sums(la, sg, counts)
            value = signed_exp(s - (support if self.weighted else np.log(data.n)), sign)
        return np.where(np.isfinite(support), value, np.nan)
