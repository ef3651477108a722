"""The world model as the model part of doubly robust estimators (`adwm_dr`, `adwm_wdr`, `adwm_magic`):
reference values on tabular MDPs with exact dynamic-programming values, and the value model that fills in
the logged steps not simulated (ope/simulated.py)."""

from __future__ import annotations

import numpy as np
import pytest

from adwm.ope import build_estimators
from adwm.ope.base import OPEData, QValues
from adwm.ope.magic import Magic
from adwm.ope.simulated import SimulatedValues, sample_steps, simulated_q_values
from tabular_mdp import TabularMDP, ope_data, q_dataset, random_mdp, sample

NAMES = ["adwm_dr", "adwm_wdr", "adwm_magic"]


def _model_values(mdp: TabularMDP, log, pi_e: np.ndarray, q_table: np.ndarray) -> QValues:
    """Q(s_t, a_t) and V(s_t) = E_{a~pi_e} Q(s_t, a) of a (time-indexed) table on the logged steps."""
    m = log.mask
    ep, t = np.nonzero(m)
    s, a = log.s[ep, t], log.a[ep, t]
    q, v = np.zeros(m.shape), np.zeros(m.shape)
    q[ep, t] = q_table[t, s, a]
    v[ep, t] = (pi_e[s] * q_table[t, s]).sum(1)
    return QValues(q_logged=q, v=v)


def _deterministic_mdp(seed: int) -> TabularMDP:
    """One start state, deterministic moves and rewards: an exact Q makes every DR term telescope."""
    rng = np.random.default_rng(seed)
    s_n, a_n = 4, 3
    p = np.zeros((s_n, a_n, s_n + 1))
    for s in range(s_n):
        for a in range(a_n):
            p[s, a, rng.integers(0, s_n + 1)] = 1.0  # index s_n: the terminal state
    d0 = np.eye(s_n)[0]
    return TabularMDP(p, rng.uniform(-0.5, 1.0, (s_n, a_n)), d0, horizon=5, gamma=0.9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_an_exact_model_every_estimator_is_the_true_value_for_any_weights(seed):
    mdp = _deterministic_mdp(seed)
    rng = np.random.default_rng(seed)
    pi_e, pi_b = rng.dirichlet(np.ones(3), size=4), rng.dirichlet(np.ones(3), size=4)
    log = sample(mdp, pi_b, 40, rng, reward_noise=0.0)
    data = ope_data(mdp, log, pi_e, pi_b)
    data.q["adwm"] = _model_values(mdp, log, pi_e, mdp.q_values(pi_e))
    truth = mdp.value(pi_e)
    for e in build_estimators(NAMES, clip=[2.0]):
        assert e.estimate(data) == pytest.approx(truth, abs=1e-9), e.name
    # any weights at all, not only the ratios of these two policies
    data.log_ratio = np.where(data.mask, rng.normal(0, 2, data.mask.shape), 0.0)
    for e in build_estimators(NAMES):
        assert e.estimate(data) == pytest.approx(truth, abs=1e-9), e.name


def test_with_a_wrong_model_and_exact_weights_the_estimates_stay_unbiased():
    mdp = random_mdp(3)
    rng = np.random.default_rng(3)
    pi_e, pi_b = rng.dirichlet(np.ones(2), size=3), np.full((3, 2), 0.5)
    truth = mdp.value(pi_e)
    wrong = mdp.q_values(pi_e) + rng.normal(0.4, 0.3, (mdp.horizon, 3, 2))  # biased by about +0.4 a step
    runs = {n: [] for n in [*NAMES, "model"]}
    for _ in range(300):
        log = sample(mdp, pi_b, 60, rng)
        data = ope_data(mdp, log, pi_e, pi_b)
        data.q["adwm"] = _model_values(mdp, log, pi_e, wrong)
        for e in build_estimators(NAMES):
            runs[e.name].append(e.estimate(data))
        runs["model"].append(data.q["adwm"].v[:, 0].mean())
    mean = {n: np.mean(v) for n, v in runs.items()}
    se = np.std(runs["adwm_dr"], ddof=1) / np.sqrt(len(runs["adwm_dr"]))
    assert abs(mean["adwm_dr"] - truth) < 3 * se  # unbiased
    assert abs(mean["model"] - truth) > 0.3  # the model alone is far off
    for name in ("adwm_wdr", "adwm_magic"):  # consistent: a bias small beside the model's
        assert abs(mean[name] - truth) < 0.05, name


def _one_step_data(log_ratio: np.ndarray, rewards: np.ndarray) -> OPEData:
    data = OPEData(rewards=rewards, mask=np.ones(rewards.shape, bool), log_ratio=log_ratio, gamma=1.0)
    data.q["adwm"] = QValues(q_logged=np.zeros(rewards.shape), v=np.full(rewards.shape, 0.5))
    return data


def test_log_space_conventions_huge_ratios_missing_probabilities_and_ess():
    rewards = np.array([[1.0], [0.0], [1.0]])
    huge = _one_step_data(np.array([[900.0], [0.0], [-900.0]]), rewards)
    for e in build_estimators(NAMES):
        d = e.diagnose(huge)
        assert d.ess == pytest.approx(1.0), e.name
        # unweighted: a value of e^900 does not fit a float, NaN flagged, never a warning or inf
        assert (d.flag == "overflow" and np.isnan(d.value)) if e.name == "adwm_dr" else d.flag is None, e.name
    # weighted: the one episode that carries the weight: its reward minus its Q plus the mean of V
    assert build_estimators(["adwm_wdr"])[0].estimate(huge) == pytest.approx(1.0 - 0.0 + 0.5)
    missing = _one_step_data(np.array([[0.0], [np.nan], [0.0]]), rewards)
    for e in build_estimators(NAMES):
        d = e.diagnose(missing)
        assert np.isnan(d.value) and d.flag == "missing_behaviour_logprob", e.name


def test_the_adwm_estimators_need_the_simulated_values():
    data = _one_step_data(np.zeros((3, 1)), np.ones((3, 1)))
    data.q.clear()
    for e in build_estimators(NAMES):
        with pytest.raises(ValueError, match=f"{e.name}: needs the action values of 'adwm'"):
            e.diagnose(data)


def test_magic_trusts_an_exact_model_and_leaves_a_biased_one():
    mdp = random_mdp(5, horizon=6)
    rng = np.random.default_rng(5)
    pi_e, pi_b = rng.dirichlet(np.ones(2), size=3), np.full((3, 2), 0.5)
    log = sample(mdp, pi_b, 400, rng)
    data = ope_data(mdp, log, pi_e, pi_b)
    magic = Magic(q_model="adwm")
    data.q["adwm"] = _model_values(mdp, log, pi_e, mdp.q_values(pi_e))
    x, g = magic.blend(data)
    assert len(g) == mdp.horizon + 1 and x.sum() == pytest.approx(1.0) and np.all(x >= 0)
    assert x[0] > 0.5  # the model's own value has the least variance and no bias
    data.q["adwm"] = _model_values(mdp, log, pi_e, mdp.q_values(pi_e) + 1.0)
    x, g = magic.blend(data)
    assert x[0] < 0.05 and x[-3:].sum() > 0.5  # far outside WDR's interval: the long returns carry it
    wdr = build_estimators(["adwm_wdr"])[0].estimate(data)
    assert g[-1] == pytest.approx(wdr)  # the longest return is WDR
    assert abs(magic.estimate(data) - mdp.value(pi_e)) < abs(g[0] - mdp.value(pi_e))


def test_the_value_model_keeps_the_simulations_and_fills_in_the_rest():
    """The simulations recalibrate a reference reading of the steps (FQE's in the stage): where the world
    model's values are an affine map of it, the value model recovers that map on the steps not simulated."""
    mdp = random_mdp(0)
    rng = np.random.default_rng(0)
    pi_e = rng.dirichlet(np.ones(2), size=3)
    log = sample(mdp, pi_e, 80, rng)
    ds, _ = q_dataset(mdp, log, pi_e)
    m = len(ds.reward)
    truth = mdp.q_values(pi_e)
    ep, t = np.nonzero(log.mask)
    s, a = log.s[ep, t], log.a[ep, t]
    q_true, v_true = truth[t, s, a], (pi_e[s] * truth[t, s]).sum(1)
    reference = QValues(q_logged=ds.pad((q_true - 0.1) / 2), v=ds.pad((v_true - 0.1) / 2))
    assert np.array_equal(sample_steps(m, 0, 0), np.arange(m)) and np.array_equal(
        sample_steps(m, m + 5, 0), np.arange(m)
    )
    index = sample_steps(m, 40, 0)
    assert len(index) == 40 and np.all(np.diff(index) > 0)
    noise = rng.normal(0, 0.02, len(index))
    sims = SimulatedValues(index, q_true[index] + noise, v_true[index] - noise)
    qv, info = simulated_q_values(ds, reference, sims, ridge=1e-6)
    q_flat, v_flat = qv.q_logged[ep, t], qv.v[ep, t]
    np.testing.assert_allclose(q_flat[index], sims.q)  # simulated steps: their own simulations
    np.testing.assert_allclose(v_flat[index], sims.v)
    rest = np.setdiff1d(np.arange(m), index)
    assert np.abs(q_flat[rest] - q_true[rest]).max() < 0.03 and np.abs(v_flat[rest] - v_true[rest]).max() < 0.03
    assert info["value_model"]["coefficients"] == pytest.approx([0.1, 2.0, 0.0], abs=0.03)
    assert info["simulated_steps"] == 40 and info["logged_steps"] == m
    assert info["value_model"]["folds"] == 5 and info["value_model"]["q_rmse"] < 0.05
    assert info["value_model"]["q_corr"] > 0.95
    assert not np.any(qv.q_logged[~log.mask]) and not np.any(qv.v[~log.mask])  # absorbing padding
    full, info = simulated_q_values(ds, reference, SimulatedValues(np.arange(m), q_true, v_true), ridge=1.0)
    np.testing.assert_allclose(full.q_logged[ep, t], q_true)
    assert "value_model" not in info
