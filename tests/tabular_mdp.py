"""A small finite-horizon tabular MDP with a terminal state, exact values by dynamic programming,
and logged datasets in the OPE input format (shared by the OPE reference tests)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adwm.ope.base import OPEData
from adwm.ope.linear_q import QDataset


@dataclass
class TabularMDP:
    p: np.ndarray  # (S, A, S + 1): next-state probabilities; index S is the absorbing terminal state
    r: np.ndarray  # (S, A) mean reward
    d0: np.ndarray  # (S,) initial distribution
    horizon: int
    gamma: float

    @property
    def n_states(self) -> int:
        return self.r.shape[0]

    @property
    def n_actions(self) -> int:
        return self.r.shape[1]

    def q_values(self, pi: np.ndarray) -> np.ndarray:
        """(H, S, A) exact Q_t of policy pi (S, A) by backward induction; terminal and t = H have value 0."""
        s, a = self.r.shape
        q = np.zeros((self.horizon, s, a))
        v_next = np.zeros(s + 1)
        for t in range(self.horizon - 1, -1, -1):
            q[t] = self.r + self.gamma * self.p @ v_next
            v_next = np.append((pi * q[t]).sum(1), 0.0)
        return q

    def value(self, pi: np.ndarray) -> float:
        return float(self.d0 @ (pi * self.q_values(pi)[0]).sum(1))


def random_mdp(seed: int, n_states: int = 3, n_actions: int = 2, horizon: int = 4, gamma: float = 0.9) -> TabularMDP:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(n_states), size=(n_states, n_actions)) * 0.8
    p = np.concatenate([p, np.full((n_states, n_actions, 1), 0.2)], axis=2)  # 20% chance to terminate per step
    return TabularMDP(
        p, rng.uniform(-0.5, 1.0, (n_states, n_actions)), rng.dirichlet(np.ones(n_states)), horizon, gamma
    )


@dataclass
class Logged:
    s: np.ndarray  # (N, H) states, -1 on padding
    a: np.ndarray  # (N, H)
    r: np.ndarray  # (N, H)
    mask: np.ndarray  # (N, H)


def sample(mdp: TabularMDP, pi_b: np.ndarray, n: int, rng: np.random.Generator, reward_noise: float = 0.1) -> Logged:
    h = mdp.horizon
    s_arr, a_arr = np.full((n, h), -1), np.full((n, h), -1)
    r_arr, mask = np.zeros((n, h)), np.zeros((n, h), bool)
    for i in range(n):
        s = rng.choice(mdp.n_states, p=mdp.d0)
        for t in range(h):
            a = rng.choice(mdp.n_actions, p=pi_b[s])
            s_arr[i, t], a_arr[i, t], mask[i, t] = s, a, True
            r_arr[i, t] = mdp.r[s, a] + reward_noise * rng.standard_normal()
            s = rng.choice(mdp.n_states + 1, p=mdp.p[s, a])
            if s == mdp.n_states:
                break
    return Logged(s_arr, a_arr, r_arr, mask)


def ope_data(mdp: TabularMDP, log: Logged, pi_e: np.ndarray, pi_b: np.ndarray) -> OPEData:
    m = log.mask
    lr = np.zeros(m.shape)
    lr[m] = np.log(pi_e[log.s[m], log.a[m]]) - np.log(pi_b[log.s[m], log.a[m]])
    return OPEData(rewards=np.where(m, log.r, 0.0), mask=m, log_ratio=lr, gamma=mdp.gamma)


def q_dataset(mdp: TabularMDP, log: Logged, pi_e: np.ndarray) -> tuple[QDataset, np.ndarray]:
    """One-hot (t, s, a) features (a tabular, time-indexed Q) and the expected features under pi_e."""
    s_n, a_n, h = mdp.n_states, mdp.n_actions, mdp.horizon
    ep, t = np.nonzero(log.mask)
    s, a = log.s[ep, t], log.a[ep, t]
    phi = np.zeros((len(ep), h * s_n * a_n))
    phi[np.arange(len(ep)), (t * s_n + s) * a_n + a] = 1.0
    phi_pi = np.zeros_like(phi)
    for b in range(a_n):
        phi_pi[np.arange(len(ep)), (t * s_n + s) * a_n + b] = pi_e[s, b]
    last = np.append(ep[1:] != ep[:-1], True)
    return QDataset(phi=phi, reward=log.r[ep, t], episode=ep, t=t, last=last), phi_pi
