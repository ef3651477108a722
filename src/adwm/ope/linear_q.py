"""Linear action-value models on (state, action) features, fitted in closed form by ridge regression.

A linear Q makes the expectation over the evaluated policy's candidate actions
exact and cheap: E_{a~pi}[Q(s, a)] = theta . E_{a~pi}[phi(s, a)], so each
policy needs only one expected feature row per logged state (`phi_pi`).
The Gram matrix is factorised once; every FQE iteration is then a matrix
product and a triangular solve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from adwm.ope.base import QValues


@dataclass
class QDataset:
    """Logged steps, episode-major with ascending t, as feature rows."""

    phi: np.ndarray  # (M, F) features of each logged (s_t, a_t)
    reward: np.ndarray  # (M,)
    episode: np.ndarray  # (M,) episode index 0..N-1
    t: np.ndarray  # (M,) step index in its episode
    last: np.ndarray  # (M,) bool: no successor (terminal, or the end of the logged episode)

    def __post_init__(self) -> None:
        m = len(self.reward)
        if self.phi.shape[0] != m or not (len(self.episode) == len(self.t) == len(self.last) == m):
            raise ValueError("QDataset: phi, reward, episode, t and last must have one row per logged step")
        nxt_same = self.episode[1:] == self.episode[:-1]
        if np.any(nxt_same & (self.t[1:] != self.t[:-1] + 1)) or np.any(self.last[:-1] == nxt_same):
            raise ValueError("QDataset: steps must be grouped by episode in order, `last` on each episode's final step")

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.episode.max()) + 1, int(self.t.max()) + 1

    def discounted_return_to_go(self, gamma: float) -> np.ndarray:
        g = np.zeros_like(self.reward)
        acc = 0.0
        for m in range(len(self.reward) - 1, -1, -1):
            acc = self.reward[m] + (0.0 if self.last[m] else gamma * acc)
            g[m] = acc
        return g

    def pad(self, values: np.ndarray) -> np.ndarray:
        """(M,) per-step values -> (N, T) with 0 on absorbing padding."""
        out = np.zeros(self.shape)
        out[self.episode, self.t] = values
        return out


class Ridge:
    """theta = argmin |phi theta - y|^2 + lam |theta|^2 for many targets y over one design."""

    def __init__(self, phi: np.ndarray, lam: float) -> None:
        if lam <= 0:
            raise ValueError(f"ridge: the penalty must be > 0, got {lam}")
        self.phi = phi
        self.factor = cho_factor(phi.T @ phi + lam * np.eye(phi.shape[1]))

    def fit(self, y: np.ndarray) -> np.ndarray:
        return cho_solve(self.factor, self.phi.T @ y)


def q_values(ds: QDataset, theta: np.ndarray, phi_pi: np.ndarray) -> QValues:
    return QValues(q_logged=ds.pad(ds.phi @ theta), v=ds.pad(phi_pi @ theta))


def fit_return_regression(ds: QDataset, phi_pi: np.ndarray, gamma: float, ridge: Ridge) -> QValues:
    """The direct method: regress the logged discounted return-to-go on phi(s_t, a_t)."""
    return q_values(ds, ridge.fit(ds.discounted_return_to_go(gamma)), phi_pi)


def fit_fqe(
    ds: QDataset, phi_pi: np.ndarray, gamma: float, ridge: Ridge, iterations: int = 0, tol: float = 1e-9
) -> tuple[QValues, dict]:
    """Fitted Q evaluation (Le et al. 2019): Q_k(s_t, a_t) <- r_t + g E_{a'~pi_e} Q_{k-1}(s_{t+1}, a').

    The backup is the expectation under the evaluated policy over the next state's candidate actions
    (its exact mixture for eps-policies), never a greedy action. With time-indexed features a horizon of
    T converges in T iterations; `iterations=0` runs up to T + 50 and stops once the largest change of
    Q on the logged steps is below `tol`."""
    n_iter = iterations or ds.shape[1] + 50
    has_next = ~ds.last
    phi_next = phi_pi[np.flatnonzero(has_next) + 1]  # the successor row of every step that has one
    theta = np.zeros(ds.phi.shape[1])
    q = np.zeros(len(ds.reward))
    change, done = float("inf"), 0
    while done < n_iter:
        done += 1
        y = ds.reward.copy()
        y[has_next] += gamma * (phi_next @ theta)
        theta = ridge.fit(y)
        q_new = ds.phi @ theta
        change = float(np.max(np.abs(q_new - q)))
        q = q_new
        if change < tol:
            break
    return q_values(ds, theta, phi_pi), {"iterations": done, "last_change": change}
