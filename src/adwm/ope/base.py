"""The estimator contract and its input: logged episodes as padded arrays, in log space.

Episodes of different lengths are padded to a common length T with an
absorbing state: after the last real step the reward is 0, the importance
ratio is 1 (log-ratio 0: both policies take the absorbing action) and every
action value is 0, so padded steps add nothing to any estimator.

Every estimator is a dataclass with a `name`; its math is one vectorised
`values(batch)` over (..., N, T) arrays, so a bootstrap evaluates many
resamples per pass. `diagnose(data)` returns the value with its effective
sample size and a flag, `estimate(data)` the value alone, and
`interval(data, alpha, n_boot, seed)` a percentile bootstrap over episodes.
An undefined estimate is NaN with a flag naming why, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp

from adwm.evaluation.bootstrap import percentile_interval, resample_counts

LOG_MAX = float(np.log(np.finfo(np.float64).max))  # exp() of more overflows


@dataclass
class QValues:
    """A fitted action-value model read on the logged steps: Q(s_t, a_t) and V(s_t) = E_{a~pi_e} Q(s_t, a)."""

    q_logged: np.ndarray  # (N, T), 0 on padding
    v: np.ndarray  # (N, T), 0 on padding


@dataclass
class OPEData:
    """Logged episodes for one evaluated policy."""

    rewards: np.ndarray  # (N, T) float64, 0 on padding
    mask: np.ndarray  # (N, T) bool, True on real steps
    log_ratio: np.ndarray  # (N, T) log pi_e(a|s) - log pi_b(a|s); 0 on padding; NaN where pi_b is unknown
    gamma: float
    q: dict[str, QValues] = field(default_factory=dict)  # action-value models by name ("fqe", "dm")

    def __post_init__(self) -> None:
        self.rewards = np.asarray(self.rewards, dtype=np.float64)
        self.mask = np.asarray(self.mask, dtype=bool)
        self.log_ratio = np.asarray(self.log_ratio, dtype=np.float64)
        if (
            self.rewards.ndim != 2
            or self.rewards.shape != self.mask.shape
            or self.rewards.shape != self.log_ratio.shape
        ):
            raise ValueError(
                f"OPEData: rewards, mask and log_ratio must share one (episodes, steps) shape; got "
                f"{self.rewards.shape}, {self.mask.shape}, {self.log_ratio.shape}"
            )
        if self.rewards.shape[0] == 0:
            raise ValueError("OPEData: no episodes")
        if not np.all(np.isfinite(self.rewards)):
            raise ValueError("OPEData.rewards: expected finite numbers")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"OPEData.gamma: expected a value in (0, 1], got {self.gamma}")
        if np.any(self.log_ratio == np.inf):
            raise ValueError("OPEData.log_ratio: +inf (a logged action the behaviour policy gives probability 0)")
        pad = ~self.mask
        if np.any(self.rewards[pad] != 0) or np.any(self.log_ratio[pad] != 0):
            raise ValueError("OPEData: padded steps must have reward 0 and log-ratio 0 (absorbing padding)")
        for name, qv in self.q.items():
            if qv.q_logged.shape != self.rewards.shape or qv.v.shape != self.rewards.shape:
                raise ValueError(f"OPEData.q['{name}']: expected arrays of shape {self.rewards.shape}")

    @property
    def n(self) -> int:
        return self.rewards.shape[0]

    def discounts(self) -> np.ndarray:
        return self.gamma ** np.arange(self.rewards.shape[1], dtype=np.float64)

    def cumulative_log_weights(self, clip: float | None = None) -> np.ndarray:
        """(N, T) log w_{0:t}, the product of ratios up to and including step t (clipped at `clip`)."""
        lw = np.cumsum(self.log_ratio, axis=1)
        return lw if clip is None else np.minimum(lw, np.log(clip))


@dataclass
class Estimate:
    name: str
    value: float  # NaN when undefined (see flag)
    ess: float  # effective sample size of the trajectory weights (N for model-based estimators)
    flag: str | None  # why the value is NaN, or None
    n_episodes: int


def signed_log(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log|x|, sign(x)); log 0 = -inf without a warning."""
    with np.errstate(divide="ignore"):
        return np.log(np.abs(x)), np.sign(x)


def signed_exp(log_abs: np.ndarray, sign: np.ndarray) -> np.ndarray:
    """sign * exp(log_abs), NaN where that does not fit a float (no overflow warning)."""
    log_abs = np.asarray(log_abs, dtype=np.float64)
    return np.where(log_abs > LOG_MAX, np.nan, sign * np.exp(np.minimum(log_abs, LOG_MAX)))


def signed_log_sum(log_abs: np.ndarray, sign: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray]:
    """log|sum sign*exp(log_abs)| and its sign over `axis`, without leaving log space."""
    return logsumexp(log_abs, axis=axis, b=sign, return_sign=True)


def log_norm(log_w: np.ndarray, axis) -> np.ndarray:
    """log sum exp(log_w) over `axis` (-inf where every weight is 0)."""
    with np.errstate(divide="ignore"):
        return logsumexp(log_w, axis=axis)


def ess(log_w: np.ndarray) -> float:
    """Kish effective sample size (sum w)^2 / sum w^2 from log-weights; NaN when every weight is 0."""
    top = log_norm(log_w, -1)
    if not np.isfinite(top):
        return float("nan")
    return float(np.exp(2 * top - log_norm(2 * log_w, -1)))


def episode_sums(log_abs: np.ndarray, sign: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log|sum_i c_bi sign_i exp(log_abs_i)| and its sign per row b of episode counts `counts` (B, N)."""
    return logsumexp(np.broadcast_to(log_abs, counts.shape), axis=-1, b=counts * sign, return_sign=True)


def shifted_weights(log_w: np.ndarray) -> np.ndarray | None:
    """exp(log w_it - max_i log w_it): per-step weights scaled so the largest is 1 (None if a step has no
    weight left). Self-normalised estimators are invariant to the scale, so their sums can run as matrix
    products of episode counts; only weights more than ~700 nats below the step's largest underflow to 0."""
    top = log_w.max(axis=0)  # (T,)
    if not np.all(np.isfinite(top)):
        return None
    return np.exp(log_w - top)


@dataclass
class Estimator:
    """The contract every baseline follows. `values(data, counts)` gives one value per row of episode
    counts (B, N): ones for the estimate itself, multinomial counts for bootstrap resamples."""

    name: str = ""
    clip: float | None = None  # cap on each cumulative importance weight (weighted estimators)

    def values(self, data: OPEData, counts: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _values(self, data: OPEData, counts: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):  # no weight left: masked to NaN and flagged
            return self.values(data, counts.astype(np.float64))

    def requires(self) -> str | None:
        """The action-value model the estimator reads from `OPEData.q`, if any."""
        return None

    def diagnose(self, data: OPEData) -> Estimate:
        need = self.requires()
        if need is not None and need not in data.q:
            raise ValueError(f"{self.name}: needs the action values of '{need}' in the data; have {sorted(data.q)}")
        lw_final = data.cumulative_log_weights(self.clip)[:, -1]
        if not self.uses_weights():
            n_eff = float(data.n)
        else:
            n_eff = ess(lw_final) if not np.any(np.isnan(lw_final)) else float("nan")
        value = float(self._values(data, np.ones((1, data.n)))[0])
        flag = None
        if not np.isfinite(value):
            if self.uses_weights() and np.any(np.isnan(data.log_ratio)):
                flag = "missing_behaviour_logprob"
            elif self.uses_weights() and not np.isfinite(log_norm(lw_final, -1)):
                flag = "no_support"
            else:
                flag = "overflow"
            value = float("nan")
        return Estimate(self.name, value, n_eff, flag, data.n)

    def uses_weights(self) -> bool:
        return True

    def estimate(self, data: OPEData) -> float:
        return self.diagnose(data).value

    def interval(self, data: OPEData, alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> dict:
        """Percentile bootstrap CI; the resampling unit is the logged episode. Fitted action-value models
        stay fixed across resamples (refitting per resample would multiply the cost by n_boot)."""
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"interval: alpha must lie in (0, 1), got {alpha}")
        counts = resample_counts(data.n, n_boot, seed)  # (B, N) resampled episodes
        lo, hi, undefined = percentile_interval(self._values(data, counts), 1 - alpha)
        return {
            "low": lo,
            "high": hi,
            "level": 1 - alpha,
            "n_boot": n_boot,
            "n_undefined": undefined,
            "unit": "episode",
        }
