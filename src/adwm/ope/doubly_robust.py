"""Doubly robust estimators with a fitted action-value model (Jiang & Li 2016; Thomas & Brunskill 2016).

    DR  = sum_t g^t sum_i [ u_{i,t} (r_it - Q(s_it, a_it)) + u_{i,t-1} V(s_it) ]

with u_{i,t} = w_{i,0:t} / N for DR and u_{i,t} = w_{i,0:t} / sum_j w_{j,0:t}
for weighted DR (WDR); u_{i,-1} = 1/N; V(s) = E_{a~pi_e} Q(s, a). Q comes
from FQE by default. DR is summed in log space (signed log-sum-exp); WDR's
self-normalised weights use weights shifted so that each step's largest is 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adwm.ope.base import Estimator, OPEData, episode_sums, shifted_weights, signed_exp, signed_log, signed_log_sum


@dataclass
class DoublyRobust(Estimator):
    weighted: bool = False
    q_model: str = "fqe"  # which fitted action values of the data to use

    def __post_init__(self) -> None:
        if self.clip is not None and not self.clip > 0:
            raise ValueError(f"{self.name or 'doubly robust'}: clip must be > 0, got {self.clip}")
        if not self.name:
            base = "wdr" if self.weighted else "dr"
            self.name = base if self.clip is None else f"{base}_clip{self.clip:g}"

    def requires(self) -> str:
        return self.q_model

    def values(self, data: OPEData, counts: np.ndarray) -> np.ndarray:
        qv = data.q[self.q_model]
        lw = data.cumulative_log_weights(self.clip)  # (N, T) log w_{0:t}
        lw_prev = np.concatenate([np.zeros((data.n, 1)), lw[:, :-1]], axis=1)  # log w_{0:t-1}; w_{0:-1} = 1
        support, _ = episode_sums(lw[:, -1], np.ones(data.n), counts)
        disc = data.discounts()
        if self.weighted:
            w, w_prev = shifted_weights(lw), shifted_weights(lw_prev)
            if w is None or w_prev is None:
                return np.full(len(counts), np.nan)
            correction = (counts @ (w * (data.rewards - qv.q_logged))) / (counts @ w)  # (B, T)
            baseline = (counts @ (w_prev * qv.v)) / (counts @ w_prev)
            value = (correction + baseline) @ disc
        else:  # per-episode sum over t of both terms, in log space
            la_c, sg_c = signed_log((data.rewards - qv.q_logged) * disc)
            la_v, sg_v = signed_log(qv.v * disc)
            la, sg = signed_log_sum(
                np.concatenate([lw + la_c, lw_prev + la_v], axis=1), np.concatenate([sg_c, sg_v], axis=1), axis=-1
            )
            s, sign = episode_sums(la, sg, counts)
            value = signed_exp(s - np.log(data.n), sign)
        return np.where(np.isfinite(support), value, np.nan)
