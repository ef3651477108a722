"""Ground truth and policy families."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adwm.envs import EnvConfig
from adwm.evaluation.config import GroundTruthConfig
from adwm.evaluation.family import FamilyConfig, family_policies
from adwm.evaluation.ground_truth import ground_truth
from adwm.policies.config import PolicyConfig


def test_family_names_and_validation():
    base = PolicyConfig(name="agent", model="m")
    fam = family_policies(base, FamilyConfig(off_path=[PolicyConfig(name="other", model="m2")]))
    assert [p.name for p in fam] == [
        "agent_eps0",
        "agent_eps0.25",
        "agent_eps0.5",
        "agent_eps0.75",
        "agent_eps1",
        "other",
    ]
    assert [p.eps for p in fam[:5]] == [0.0, 0.25, 0.5, 0.75, 1.0]
    with pytest.raises(ValueError, match=r"family.eps\[1\]: expected a value in \[0, 1\], got 1.5"):
        family_policies(base, FamilyConfig(eps=[0.0, 1.5]))
    with pytest.raises(ValueError, match=r"repeated: \['agent_eps0'\]"):
        family_policies(base, FamilyConfig(eps=[0.0], off_path=[PolicyConfig(name="agent_eps0")]))


def test_ground_truth_values_common_seeds_and_resume(tmp_path, tiny_lm_dir):
    out = tmp_path / "gt.json"
    cfg = GroundTruthConfig(n_episodes=24, n_envs=8, out=str(out))
    pols = [
        PolicyConfig(name="u1", kind="uniform"),
        PolicyConfig(name="u2", kind="uniform"),
        PolicyConfig(name="tiny", model=tiny_lm_dir),
    ]
    res = ground_truth(pols, cfg, EnvConfig(), seed=0, progress=False)
    assert list(res) == ["u1", "u2", "tiny"]
    assert res["u1"]["returns"] == res["u2"]["returns"]  # same seeds, same draws: common random numbers
    for r in res.values():
        assert 0.0 <= r["J"] <= 1.0 and r["n"] == 24 and len(r["returns"]) == 24
        assert r["se"] == pytest.approx(float(np.std(r["returns"], ddof=1)) / 24**0.5)
    before = json.loads(out.read_text())
    res2 = ground_truth(pols + [PolicyConfig(name="u3", kind="uniform")], cfg, EnvConfig(), seed=0, progress=False)
    after = json.loads(out.read_text())
    assert all(after[k]["seconds"] == before[k]["seconds"] for k in before)  # not rerun
    assert res2["u3"]["returns"] == res["u1"]["returns"]


def test_changed_policy_config_is_measured_again(tmp_path):
    cfg = GroundTruthConfig(n_episodes=4, n_envs=4, out=str(tmp_path / "gt.json"))
    first = ground_truth([PolicyConfig(name="p", kind="uniform")], cfg, EnvConfig(), seed=0, progress=False)
    again = ground_truth(
        [PolicyConfig(name="p", kind="uniform", eps=0.5)], cfg, EnvConfig(max_steps=5), seed=0, progress=False
    )
    assert first["p"]["settings"] != again["p"]["settings"]
    assert json.loads((tmp_path / "gt.json").read_text())["p"]["settings"] == again["p"]["settings"]
    assert max(again["p"]["returns"]) <= 1.0 and again["p"]["mean_length"] <= 5
