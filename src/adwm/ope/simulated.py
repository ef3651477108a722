"""The world model's action values on the logged steps, for `adwm_dr`, `adwm_wdr` and `adwm_magic`.

The evaluated agent is simulated from a sample of the logged steps (`ope.simulated.states`; 0: every one):
from each, `rollouts` returns with the logged action taken first (Q(s_t, a_t)) and as many with the agent
acting from the start (V(s_t)). Where every logged step was simulated, Q and V are the simulations' means.
Elsewhere a small value model fills them in: one ridge regression, on the (state, action) features the
linear baselines use, of the simulated Q returns on phi(s, a_t) and of the simulated V returns on
E_{a~pi} phi(s, a) (a linear Q makes V its expectation under the agent). At the sampled steps the
simulations' own means are used. `cv` is the value model's error against the simulations on held-out
sampled steps (K-fold), the price of not simulating every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adwm.ope.base import QValues
from adwm.ope.linear_q import QDataset, Ridge


@dataclass
class SimulatedValues:
    index: np.ndarray  # (K,) the sampled logged steps (episode-major step order)
    q: np.ndarray  # (K,) mean simulated return with the logged action first
    v: np.ndarray  # (K,) mean simulated return of the agent


def sample_steps(n_steps: int, states: int, seed: int) -> np.ndarray:
    """The logged steps to simulate from: all of them (`states` 0 or at least `n_steps`), or `states` drawn
    without replacement, sorted."""
    if states <= 0 or states >= n_steps:
        return np.arange(n_steps)
    return np.sort(np.random.default_rng((seed, 17)).choice(n_steps, size=states, replace=False))


def _fit(phi: np.ndarray, phi_pi: np.ndarray, sims: SimulatedValues, rows: np.ndarray, ridge: float) -> np.ndarray:
    design = np.concatenate([phi[sims.index[rows]], phi_pi[sims.index[rows]]])
    target = np.concatenate([sims.q[rows], sims.v[rows]])
    return Ridge(design, ridge).fit(target)


def simulated_q_values(
    ds: QDataset, phi_pi: np.ndarray, sims: SimulatedValues, ridge: float, folds: int = 5, seed: int = 0
) -> tuple[QValues, dict]:
    """Q(s_t, a_t) and V(s_t) on every logged step (module docstring) -> (QValues, info with the value
    model's held-out error where it is used)."""
    m = len(ds.reward)
    q, v = np.empty(m), np.empty(m)
    info: dict = {"simulated_steps": len(sims.index), "logged_steps": m}
    if len(sims.index) < m:
        theta = _fit(ds.phi, phi_pi, sims, np.arange(len(sims.index)), ridge)
        q, v = ds.phi @ theta, phi_pi @ theta
        info["value_model"] = _cross_validated(ds.phi, phi_pi, sims, ridge, folds, seed)
    q[sims.index], v[sims.index] = sims.q, sims.v
    return QValues(q_logged=ds.pad(q), v=ds.pad(v)), info


def _cross_validated(
    phi: np.ndarray, phi_pi: np.ndarray, sims: SimulatedValues, ridge: float, folds: int, seed: int
) -> dict:
    """RMSE and correlation of the value model's Q and V against the simulations on held-out sampled steps."""
    k = len(sims.index)
    folds = min(folds, k)
    if folds < 2:
        return {"folds": 0}
    fold = np.random.default_rng((seed, 19)).permutation(k) % folds
    pred_q, pred_v = np.empty(k), np.empty(k)
    for f in range(folds):
        held = fold == f
        theta = _fit(phi, phi_pi, sims, np.flatnonzero(~held), ridge)
        pred_q[held] = phi[sims.index[held]] @ theta
        pred_v[held] = phi_pi[sims.index[held]] @ theta
    out = {"folds": folds}
    for name, pred, sim in (("q", pred_q, sims.q), ("v", pred_v, sims.v)):
        out[f"{name}_rmse"] = float(np.sqrt(np.mean((pred - sim) ** 2)))
        out[f"{name}_corr"] = float(np.corrcoef(pred, sim)[0, 1]) if np.std(sim) > 0 and np.std(pred) > 0 else None
    return out
