"""The `ablation` node is the ablation study: every switch maps to the settings it changes, and a grid over
`ablation.*` on the smoke config gives one table row per switch."""

from __future__ import annotations

import dataclasses

import pytest

from adwm.config import ConfigError, load_config
from adwm.config.schema import AblationConfig


def _switches() -> dict[str, list[str]]:
    """One grid variant per switch of the ablation node, flipped from its default (the `world` switch set to
    a control), beside the default."""
    variants: dict[str, list[str]] = {"full": []}
    for f in dataclasses.fields(AblationConfig):
        if f.type in (bool, "bool"):
            variants[f"{f.name}_{'off' if f.default else 'on'}"] = [f"ablation.{f.name}={not f.default}"]
        elif f.name == "reader":
            variants["reader_decoded"] = ["ablation.reader=decoded"]
        else:
            variants[f"{f.name}_nearest"] = [f"ablation.{f.name}=nearest"]
    return variants


@pytest.mark.parametrize(
    "switch, expected",
    [
        ("ablation.action_guidance=false", {"guidance.omega": 0.0}),
        ("ablation.continuation=true", {"guidance.eta": 1.0, "evaluate.world": "diffusion"}),
        ("ablation.reader=projector", {"ablation.reader": "projector", "evaluate.world": "diffusion"}),
        (
            "ablation.reader=decoded",
            {"evaluate.diffusion.snap": False, "evaluate.world": "diffusion", "world_model.decoder.enabled": True},
        ),
        ("ablation.log_rewards=false", {"evaluate.guided_analogy.rewards": "heads"}),
        ("ablation.world=oracle", {"evaluate.world": "oracle"}),
        ("ablation.joint_encoder=false", {"ablation.joint_encoder": False}),
    ],
)
def test_each_switch_sets_what_it_names(switch, expected):
    from omegaconf import OmegaConf

    default = load_config([], "evaluate")
    cfg = load_config([switch], "evaluate")
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key) == value != OmegaConf.select(default, key)


def test_continuation_keeps_an_eta_set_and_a_bad_world_is_named():
    cfg = load_config(["ablation.continuation=true", "guidance.eta=0.5"], "evaluate")
    assert cfg.guidance.eta == 0.5
    with pytest.raises(ConfigError, match=r"ablation.world: unknown world 'dream'; choose from \['diffusion'"):
        load_config(["ablation.world=dream"], "evaluate")


def test_every_switch_of_the_node_has_a_variant():
    names = {f.name for f in dataclasses.fields(AblationConfig)}
    assert len(_switches()) == len(names) + 1
    assert names == {"action_guidance", "continuation", "reader", "joint_encoder", "log_rewards", "world"}


@pytest.mark.ci
@pytest.mark.slow  # ~2 min: seven smoke runs on one log, two world models
def test_a_grid_over_the_ablation_node_has_one_row_per_switch(tmp_path):
    import yaml

    from adwm.cli import main

    spec = {
        "name": "switches",
        "out": str(tmp_path / "grid"),
        "overrides": ["experiment=smoke", "ope.ci_resamples=50", "evaluate.calibration=none"],
        "axes": {"variant": _switches()},
        "seeds": [0],
        "workers": 1,
    }
    path = tmp_path / "switches.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["grid", str(path)]) == 0
    table = (tmp_path / "grid" / "table.md").read_text()
    # with `evaluate.calibration=none` the uncalibrated estimate is the `adwm` row
    assert "| adwm_sim (" not in table
    for name in _switches():
        assert f"| adwm ({name}) |" in table
