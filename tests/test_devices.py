"""Devices from config: `evaluate.device` and `policy.device` (cpu, cuda[:k], mps, auto)."""

from __future__ import annotations

import pytest
import torch

from adwm.cli import main
from adwm.config import ConfigError, load_config
from adwm.runtime.atomic import read_json
from adwm.runtime.devices import resolve_device
from helpers import reads


def test_auto_is_the_cpu_without_a_gpu_and_a_missing_gpu_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto", "evaluate.device") == torch.device("cpu")
    with pytest.raises(RuntimeError, match=r"evaluate.device=cuda:1: no CUDA device is available here"):
        resolve_device("cuda:1", "evaluate.device")
    with pytest.raises(ConfigError, match=r"evaluate.device: expected one of \['cpu', 'cuda', 'mps', 'auto'\]"):
        load_config(["evaluate.device=gpu"])
    with pytest.raises(ConfigError, match=r"policy.device: expected one of .* got 'cuda:x'"):
        load_config(["policy.device=cuda:x"])


def test_evaluation_on_the_device_from_config_equals_the_default(smoke_run, tmp_path, one_thread):
    """The device path (world model, projector, tail value and agents moved to the resolved device) on a CPU
    machine gives the estimates of the default run bit for bit."""
    family = ["family.eps=[0.0,1.0]", "family.off_path=[]", "evaluate.calibration=none", "workers=1"]
    out = tmp_path / "auto.json"
    assert (
        main(
            [
                "evaluate",
                *reads(smoke_run),
                *family,
                "evaluate.device=auto",
                "policy.device=auto",
                f"evaluate.out={out}",
            ]
        )
        == 0
    )
    default = read_json(smoke_run / "quickstart" / "estimates.json")["estimates"]
    auto = read_json(out)["estimates"]
    for name in ("iter3_eps0", "iter3_eps1"):
        assert auto[name]["J_hat_sim"] == default[name]["J_hat_sim"]
        assert auto[name]["settings"]["policy"]["device"] == "auto"


def test_one_device_key_moves_the_simulator_and_every_agent():
    cfg = load_config(["device=auto"], "quickstart")
    agents = [cfg.policy, *cfg.family.off_path, *(b.policy for b in cfg.collect.behaviour)]
    assert len(agents) >= 3 and {a.device for a in agents} == {"auto"} and cfg.evaluate.device == "auto"
    assert load_config([], "quickstart").family.off_path[0].device == "cpu"  # unset: each key's own
    with pytest.raises(ConfigError, match=r"command line: device: expected one of .* got 'gpu'"):
        load_config(["device=gpu"])
