"""Reference tests of the classic OPE baselines on a tabular MDP with exact DP values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from adwm.ope import ESTIMATORS, DoublyRobust, ImportanceSampling, ModelEstimate, OPEData, QValues, build_estimators
from adwm.ope.linear_q import Ridge, fit_fqe, fit_return_regression
from tabular_mdp import TabularMDP, ope_data, q_dataset, random_mdp, sample

PI_B = np.array([[0.5, 0.5], [0.7, 0.3], [0.4, 0.6]])
PI_E = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])


@pytest.fixture(scope="module")
def mdp() -> TabularMDP:
    return random_mdp(seed=3)


def test_dp_value_matches_monte_carlo(mdp):
    """The DP reference itself, against a large on-policy sample (independent check of the test MDP)."""
    log = sample(mdp, PI_E, 20000, np.random.default_rng(0), reward_noise=0.0)
    mc = (log.r * mdp.gamma ** np.arange(mdp.horizon)).sum(1)
    assert abs(mc.mean() - mdp.value(PI_E)) < 4 * mc.std() / np.sqrt(len(mc))


def _repeat(mdp, n_sets, n, fn, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([fn(sample(mdp, PI_B, n, rng)) for _ in range(n_sets)])


@pytest.mark.parametrize("name", ["is", "pdis"])
def test_unweighted_importance_sampling_is_unbiased(mdp, name):
    est = ESTIMATORS[name](None)
    values = _repeat(mdp, 400, 40, lambda log: est.estimate(ope_data(mdp, log, PI_E, PI_B)))
    truth = mdp.value(PI_E)
    assert abs(values.mean() - truth) < 4 * values.std() / np.sqrt(len(values))


def test_doubly_robust_is_unbiased_with_a_fixed_q(mdp):
    """DR is unbiased for any Q fitted independently of the data: here FQE on a separate small log."""
    rng = np.random.default_rng(11)
    ds, phi_pi = q_dataset(mdp, sample(mdp, PI_B, 30, rng), PI_E)
    fitted = fit_fqe(ds, phi_pi, mdp.gamma, Ridge(ds.phi, 1.0))[0]
    # the fixed model as a table Q[t, s, a] (unvisited cells 0, ridge-shrunk: a deliberately imperfect Q)
    cell = ds.phi.argmax(1)  # one-hot index (t * S + s) * A + a
    q_tab = np.zeros((mdp.horizon, mdp.n_states, mdp.n_actions))
    q_tab[ds.t, cell // mdp.n_actions % mdp.n_states, cell % mdp.n_actions] = fitted.q_logged[ds.episode, ds.t]

    def dr(log):
        data = ope_data(mdp, log, PI_E, PI_B)
        s, a, m = np.maximum(log.s, 0), np.maximum(log.a, 0), log.mask
        t = np.broadcast_to(np.arange(mdp.horizon), m.shape)
        q = np.where(m, q_tab[t, s, a], 0.0)
        v = np.where(m, (q_tab[t, s] * PI_E[s]).sum(-1), 0.0)
        data.q["fqe"] = QValues(q, v)
        return DoublyRobust().estimate(data)

    values = _repeat(mdp, 400, 40, dr, seed=5)
    assert abs(values.mean() - mdp.value(PI_E)) < 4 * values.std() / np.sqrt(len(values))


def test_weighted_estimates_lie_in_the_observed_return_range(mdp):
    rng = np.random.default_rng(1)
    for _ in range(50):
        log = sample(mdp, PI_B, 10, rng)
        data = ope_data(mdp, log, PI_E, PI_B)
        returns = data.rewards @ data.discounts()
        wis = ImportanceSampling(weighted=True).estimate(data)
        assert returns.min() - 1e-12 <= wis <= returns.max() + 1e-12


def _empirical_dp(mdp, log, pi_e):
    """Time-indexed DP on the empirical MDP of the log: the fixed point a tabular FQE must reach."""
    h, s_n, a_n = mdp.horizon, mdp.n_states, mdp.n_actions
    q = np.zeros((h + 1, s_n, a_n))
    for t in range(h - 1, -1, -1):
        total, count = np.zeros((s_n, a_n)), np.zeros((s_n, a_n))
        for i in np.flatnonzero(log.mask[:, t]):
            s, a = log.s[i, t], log.a[i, t]
            nxt = 0.0
            if t + 1 < h and log.mask[i, t + 1]:
                s2 = log.s[i, t + 1]
                nxt = (pi_e[s2] * q[t + 1, s2]).sum()
            total[s, a] += log.r[i, t] + mdp.gamma * nxt
            count[s, a] += 1
        q[t] = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    starts = log.s[:, 0]
    return float(np.mean((pi_e[starts] * q[0, starts]).sum(1)))


def test_fqe_reaches_the_dp_value(mdp):
    log = sample(mdp, PI_B, 6000, np.random.default_rng(2))
    ds, phi_pi = q_dataset(mdp, log, PI_E)
    qv, info = fit_fqe(ds, phi_pi, mdp.gamma, Ridge(ds.phi, 1e-9))
    data = ope_data(mdp, log, PI_E, PI_B)
    data.q["fqe"] = qv
    fqe = ModelEstimate(name="fqe", q_model="fqe").estimate(data)
    assert fqe == pytest.approx(_empirical_dp(mdp, log, PI_E), abs=1e-6)  # the exact fixed point
    assert fqe == pytest.approx(mdp.value(PI_E), abs=0.03)  # and the true value, up to sampling error
    assert info["iterations"] <= mdp.horizon + 1  # time-indexed: converges in H backups


def test_fqe_backs_up_the_expectation_not_the_greedy_action(mdp):
    log = sample(mdp, PI_B, 6000, np.random.default_rng(4))
    uniform = np.full_like(PI_E, 0.5)
    values = {}
    for name, pi in {"e": PI_E, "uniform": uniform}.items():
        ds, phi_pi = q_dataset(mdp, log, pi)
        data = ope_data(mdp, log, pi, PI_B)
        data.q["fqe"] = fit_fqe(ds, phi_pi, mdp.gamma, Ridge(ds.phi, 1e-9))[0]
        values[name] = ModelEstimate(q_model="fqe").estimate(data)
    assert values["uniform"] == pytest.approx(mdp.value(uniform), abs=0.03)
    assert values["e"] == pytest.approx(mdp.value(PI_E), abs=0.03)


def test_direct_method_regresses_the_return_to_go(mdp):
    """With pi_e = pi_b the return regression is the behaviour value (on-policy), within sampling error."""
    log = sample(mdp, PI_B, 6000, np.random.default_rng(6))
    ds, phi_pi = q_dataset(mdp, log, PI_B)
    data = ope_data(mdp, log, PI_B, PI_B)
    data.q["dm"] = fit_return_regression(ds, phi_pi, mdp.gamma, Ridge(ds.phi, 1e-9))
    assert ModelEstimate(name="dm", q_model="dm").estimate(data) == pytest.approx(mdp.value(PI_B), abs=0.03)


def test_hand_computed_wis_and_wpdis():
    # two episodes of two steps, gamma 0.5; ratios (2, 1) and (0.5, 4); rewards (1, 2) and (0, 3)
    data = OPEData(
        rewards=np.array([[1.0, 2.0], [0.0, 3.0]]),
        mask=np.ones((2, 2), bool),
        log_ratio=np.log([[2.0, 1.0], [0.5, 4.0]]),
        gamma=0.5,
    )
    # returns 1 + 0.5*2 = 2 and 0 + 0.5*3 = 1.5; trajectory weights 2 and 2
    assert ImportanceSampling(weighted=True).estimate(data) == pytest.approx((2 * 2 + 2 * 1.5) / 4)
    assert ImportanceSampling().estimate(data) == pytest.approx((2 * 2 + 2 * 1.5) / 2)
    # per decision: t=0 weights (2, 0.5) rewards (1, 0) -> 2/2.5; t=1 weights (2, 2) rewards (2, 3) -> 2.5
    assert ImportanceSampling(per_decision=True, weighted=True).estimate(data) == pytest.approx(0.8 + 0.5 * 2.5)
    assert ImportanceSampling(per_decision=True).estimate(data) == pytest.approx((2 * 1 + 0.5 * (2 * 2 + 2 * 3)) / 2)


def test_identical_policies_give_unit_weights(mdp):
    log = sample(mdp, PI_B, 200, np.random.default_rng(7))
    data = ope_data(mdp, log, PI_B, PI_B)
    assert np.all(data.log_ratio == 0.0)  # weights exactly 1
    mean_return = float(np.mean(data.rewards @ data.discounts()))
    for name in ("is", "pdis", "wis", "wpdis"):
        est = ESTIMATORS[name](None).diagnose(data)
        assert est.value == pytest.approx(mean_return, rel=1e-12)
        assert est.ess == pytest.approx(data.n, rel=1e-12)


def test_huge_log_ratios_never_overflow():
    rng = np.random.default_rng(0)
    lr = rng.choice([-300.0, 300.0], size=(20, 5))
    data = OPEData(rewards=rng.uniform(0, 1, (20, 5)), mask=np.ones((20, 5), bool), log_ratio=lr, gamma=0.95)
    qv = QValues(np.full((20, 5), 0.5), np.full((20, 5), 0.5))
    data.q["fqe"] = data.q["dm"] = data.q["adwm"] = qv
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for est in build_estimators(list(ESTIMATORS)):
            e = est.diagnose(data)
            assert np.isfinite(e.value) or e.flag == "overflow", (est.name, e)
    assert np.isnan(ImportanceSampling().diagnose(data).value)  # ~exp(1500): flagged, not inf
    assert ImportanceSampling(weighted=True).diagnose(data).flag is None


@pytest.mark.filterwarnings("error")
def test_undefined_estimates_are_nan_with_a_flag():
    data = OPEData(rewards=np.ones((3, 2)), mask=np.ones((3, 2), bool), log_ratio=np.full((3, 2), -np.inf), gamma=1.0)
    for name in ("is", "wis", "pdis", "wpdis"):
        e = ESTIMATORS[name](None).diagnose(data)
        assert np.isnan(e.value) and e.flag == "no_support"
    missing = OPEData(rewards=np.ones((2, 2)), mask=np.ones((2, 2), bool), log_ratio=np.full((2, 2), np.nan), gamma=1.0)
    assert ImportanceSampling().diagnose(missing).flag == "missing_behaviour_logprob"


def test_variable_lengths_use_absorbing_padding(mdp):
    log = sample(mdp, PI_B, 300, np.random.default_rng(8))
    assert not log.mask.all()  # some episodes end early
    data = ope_data(mdp, log, PI_E, PI_B)
    lw = data.cumulative_log_weights()
    ends = log.mask.sum(1) - 1
    for i in range(data.n):  # the weight stays at its final value through the padding
        assert np.all(lw[i, ends[i] :] == lw[i, ends[i]])


def test_clipping_variants_are_named_and_cap_weights(mdp):
    names = [e.name for e in build_estimators(["is", "wis", "dm"], clip=[10])]
    assert names == ["is", "wis", "dm", "is_clip10", "wis_clip10"]
    data = ope_data(mdp, sample(mdp, PI_B, 50, np.random.default_rng(9)), PI_E, PI_B)
    assert np.all(data.cumulative_log_weights(clip=2.0) <= np.log(2.0))


def test_interval_resamples_episodes(mdp):
    data = ope_data(mdp, sample(mdp, PI_B, 100, np.random.default_rng(10)), PI_E, PI_B)
    est = ImportanceSampling(weighted=True)
    ci = est.interval(data, alpha=0.1, n_boot=200, seed=0)
    assert ci["low"] < est.estimate(data) < ci["high"] and ci["unit"] == "episode" and ci["n_boot"] == 200
    assert est.interval(data, alpha=0.1, n_boot=200, seed=0) == ci  # deterministic per seed


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: build_estimators(["is", "magic"]), "ope.estimators: unknown estimator 'magic'"),
        (lambda: ImportanceSampling(clip=0), "clip must be > 0"),
        (lambda: OPEData(np.ones((2, 2)), np.ones((2, 3), bool), np.zeros((2, 2)), 0.9), "share one"),
        (lambda: OPEData(np.ones((1, 2)), np.array([[True, False]]), np.zeros((1, 2)), 0.9), "absorbing padding"),
        (lambda: OPEData(np.ones((1, 1)), np.ones((1, 1), bool), np.zeros((1, 1)), 1.5), "gamma"),
        (lambda: Ridge(np.ones((2, 2)), 0.0), "penalty must be > 0"),
    ],
)
def test_invalid_inputs_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_model_estimators_need_their_q():
    data = OPEData(np.ones((1, 1)), np.ones((1, 1), bool), np.zeros((1, 1)), 0.9)
    with pytest.raises(ValueError, match="needs the action values of 'fqe'"):
        DoublyRobust().estimate(data)


def test_self_normalised_estimators_are_consistent(mdp):
    """WIS, WPDIS and WDR are biased for small N but converge to the true value on a large log."""
    log = sample(mdp, PI_B, 8000, np.random.default_rng(12))
    ds, phi_pi = q_dataset(mdp, log, PI_E)
    data = ope_data(mdp, log, PI_E, PI_B)
    data.q["fqe"] = fit_fqe(ds, phi_pi, mdp.gamma, Ridge(ds.phi, 1e-9))[0]
    truth = mdp.value(PI_E)
    for name in ("wis", "wpdis", "wdr"):
        assert ESTIMATORS[name](None).estimate(data) == pytest.approx(truth, abs=0.04), name
