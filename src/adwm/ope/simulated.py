"""The world model's action values on the logged steps, for `adwm_dr`, `adwm_wdr` and `adwm_magic`.

The evaluated agent is simulated from a sample of the logged steps (`ope.simulated.states`; 0: every one):
from each, `rollouts` returns with the logged action taken first (Q(s_t, a_t)) and as many with the agent
acting from the start (V(s_t)). Where every logged step was simulated, Q and V are the simulations' means.
Elsewhere a small value model fills them in: one ridge regression of the simulated returns on three
features of the step, [1, FQE's value there, t / T] (FQE's Q(s_t, a_t) for a Q return, its V(s_t) for a
V return): the simulations recalibrate FQE's reading of the state to the world model's, with three
parameters that a few hundred simulations determine (the linear baselines' own (state, action) features
have hundreds of dimensions, more than the sample). At the sampled steps the simulations' own means
are used. `cv` is the value model's error against the simulations on held-out
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


def value_features(ds: QDataset, reference: QValues) -> tuple[np.ndarray, np.ndarray]:
    """(M, 3) rows of the value model for Q returns and for V returns (module docstring), episode-major."""
    t = ds.t / max(1, int(ds.t.max()) + 1)
    ones = np.ones(len(t))
    q_ref, v_ref = reference.q_logged[ds.episode, ds.t], reference.v[ds.episode, ds.t]
    return np.stack([ones, q_ref, t], 1), np.stack([ones, v_ref, t], 1)


def _fit(phi: np.ndarray, phi_pi: np.ndarray, sims: SimulatedValues, rows: np.ndarray, ridge: float) -> np.ndarray:
    design = np.concatenate([phi[sims.index[rows]], phi_pi[sims.index[rows]]])
    target = np.concatenate([sims.q[rows], sims.v[rows]])
    return Ridge(design, ridge).fit(target)


def simulated_q_values(
    ds: QDataset, reference: QValues, sims: SimulatedValues, ridge: float, folds: int = 5, seed: int = 0
) -> tuple[QValues, dict]:
    """Q(s_t, a_t) and V(s_t) on every logged step (module docstring; `reference`: FQE's values on the
    logged steps) -> (QValues, info with the value model's held-out error where it is used)."""
    m = len(ds.reward)
    q, v = np.empty(m), np.empty(m)
    info: dict = {"simulated_steps": len(sims.index), "logged_steps": m}
    if len(sims.index) < m:
        phi, phi_pi = value_features(ds, reference)
        theta = _fit(phi, phi_pi, sims, np.arange(len(sims.index)), ridge)
        q, v = phi @ theta, phi_pi @ theta
        info["value_model"] = _cross_validated(phi, phi_pi, sims, ridge, folds, seed)
        info["value_model"]["coefficients"] = [round(float(c), 4) for c in theta]
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
