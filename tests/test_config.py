"""Config composition and validation: every error names its source, the dotted key and what is allowed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from adwm.cli import main
from adwm.config import ConfigError, config_dir, load_config, to_object


def test_defaults_compose_and_interpolations_resolve():
    cfg = load_config([], "collect")
    assert cfg.run.dir == "runs/default/seed0/collect"
    assert cfg.policy.model == "runs/default/seed0/agents/iter3"
    assert cfg.collect.behaviour[0].policy.model == "runs/default/seed0/agents/iter1"
    assert to_object(cfg.env).builtin.max_rooms == 5


def test_overrides_experiment_and_group_choice():
    cfg = load_config(
        ["experiment=smoke", "policy=uniform", "seed=4", "env.max_steps=12", "run.root=/tmp/x"], "quickstart"
    )
    assert cfg.experiment == "smoke" and cfg.seed == 4 and cfg.env.max_steps == 12
    assert cfg.policy.kind == "uniform" and cfg.collect.n_episodes == 12
    assert cfg.run.dir == "/tmp/x/quickstart" and cfg.agent.dir == "/tmp/x/agents"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["env.nokey=3"],
            r"command line: unknown config key 'env.nokey'; allowed keys here: \['builtin', 'gamma', 'max_steps', 'multihop', 'name', 'scienceworld', 'shop', 'textworld', 'world'\]",
        ),
        (["typo=1"], r"command line: unknown config key 'typo'"),
        (
            ["env.max_steps=many"],
            r"command line: config key 'env.max_steps': Value 'many' of type 'str' could not be converted to Integer",
        ),
        (["env.builtin.locked_door_prob=[1]"], r"config key 'env.builtin.locked_door_prob'"),
        (
            ["env=marsworld"],
            r"unknown choice 'marsworld' for group 'env'; choose from \['builtin', 'log', 'multihop', 'scienceworld', 'shop', 'textworld_cooking'\]",
        ),
        (
            ["logger=tensorboard"],
            r"unknown choice 'tensorboard' for group 'logger'; choose from \['csv', 'none', 'wandb'\]",
        ),
        (["experiment=nope"], r"unknown experiment 'nope'; choose from \[.*'smoke'.*\]"),
        (["seed"], r"override 'seed' is not of the form key=value"),
    ],
)
def test_invalid_overrides_fail_with_named_key(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(overrides)
    assert "\n" not in str(err.value)


def test_bad_key_in_a_group_file_names_the_file(tmp_path, monkeypatch):
    root = tmp_path / "configs"
    shutil.copytree(config_dir(), root)
    (root / "env" / "broken.yaml").write_text("name: builtin\nmax_stepz: 3\n")
    monkeypatch.setenv("ADWM_CONFIG_DIR", str(root))
    with pytest.raises(ConfigError, match=r"env/broken.yaml: unknown config key 'env.max_stepz'"):
        load_config(["env=broken"])


def test_package_resolver_only_locates_model_packages():
    with pytest.raises(ConfigError, match=r"policy.model.*pkg_path:os}: expected one of the model packages"):
        load_config(["policy.model=${pkg_path:os}"])


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml")))
def test_every_experiment_file_loads(experiment):
    cfg = load_config([f"experiment={experiment}"], "quickstart")
    assert cfg.experiment == experiment


def test_a_family_that_needs_another_group_says_so():
    with pytest.raises(ConfigError, match=r"family.optional\[0\].prompt_template.*needs another group choice"):
        load_config(["family=eps_offpath_smollm2"])
    assert load_config(["family=eps_offpath_smollm2", "agent=tiny_smollm2"]).family.optional[1].name == "smollm2_lora"


def test_a_group_file_extends_another_choice(tmp_path, monkeypatch):
    tiny, extended = load_config(["agent=tiny"]), load_config(["agent=tiny_smollm2"])
    assert extended.agent.model == tiny.agent.model and extended.agent.lr == tiny.agent.lr
    assert set(extended.agent.variants) == set(tiny.agent.variants) | {"smollm2_lora"}
    assert extended.agent.variants.iter3 == tiny.agent.variants.iter3
    root = tmp_path / "configs"
    shutil.copytree(config_dir(), root)
    monkeypatch.setenv("ADWM_CONFIG_DIR", str(root))
    (root / "agent" / "loop.yaml").write_text("extends: other\n")
    (root / "agent" / "other.yaml").write_text("extends: loop\n")
    with pytest.raises(ConfigError, match=r"loop.yaml: 'extends' forms a cycle through 'loop'"):
        load_config(["agent=loop"])
    (root / "agent" / "self.yaml").write_text("extends: self\n")
    with pytest.raises(ConfigError, match=r"self.yaml: extends: 'self' is its own name, and no config folder"):
        load_config(["agent=self"])
    (root / "agent" / "orphan.yaml").write_text("extends: small\n")
    with pytest.raises(ConfigError, match=r"orphan.yaml: extends: unknown choice 'small' for group 'agent'"):
        load_config(["agent=orphan"])


BAD_VALUES = [
    ("guidance.omega=-1", "guidance.omega: expected >= 0, got -1.0"),
    ("guidance.space=z", "guidance.space: unknown space 'z'"),
    ("policy.eps=1.5", r"policy.eps: expected a value in \[0, 1\], got 1.5 \(policy 'iter3'\)"),
    ("policy.mode=chat", r"policy.mode: expected one of \['score', 'generate'\], got 'chat' \(policy 'iter3'\)"),
    ("collect.behaviour[1].policy.eps=2", r"collect.behaviour\[1\].policy.eps: expected a value in \[0, 1\], got 2.0"),
    ("fit.max_steps=-3", r"fit.max_steps: expected a number of steps >= 0 \(0 = no limit\), got -3"),
    ("fit.max_minutes=0", "fit.max_minutes: expected a wall-clock cap > 0, got 0.0"),
    ("fit.encoder_share=1.5", r"fit.encoder_share: expected a value in \[0, 1\], got 1.5"),
    ("evaluate.simulate.n_rollouts=0", "evaluate.simulate.n_rollouts: expected >= 1, got 0"),
    (
        "evaluate.simulate.horizon=-3",
        r"evaluate.simulate.horizon: expected >= 0 \(0 = env.max_steps\), got -3",
    ),
    ("evaluate.diffusion.candidates=nearest", "evaluate.diffusion.candidates: unknown rule 'nearest'"),
    ("evaluate.calibration=affine", "evaluate.calibration: expected one of .*got 'affine'"),
    ("projector.max_candidates=1", r"projector.max_candidates: expected 0 \(all\) or at least 2, got 1"),
    ("ope.features=bag", "ope.features: unknown feature source 'bag'"),
    ("ope.estimators=[is,magic]", "magic"),
    ("world_model.proposal=oracle", "world_model.proposal: unknown mode 'oracle'"),
    ("fit.rollout_heads.steps=0", "fit.rollout_heads: passes, steps and batch_size must be at least 1"),
]


@pytest.mark.parametrize("override,message", BAD_VALUES)
def test_every_stage_config_rejects_a_bad_value_at_load_with_its_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config([override], "evaluate")


def test_a_bad_value_fails_every_command_before_any_work(tmp_path, capsys):
    assert main(["fit", "fit.max_steps=-1", f"run.root={tmp_path}"]) == 2
    assert "fit.max_steps: expected a number of steps >= 0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing was written


@pytest.mark.parametrize(
    "override,message",
    [
        ("collect.n_episodes=0", "collect.n_episodes: expected >= 1, got 0"),
        ("collect.n_envs=0", "collect.n_envs: expected >= 1, got 0"),
        ("ground_truth.n_episodes=0", "ground_truth.n_episodes: expected >= 1, got 0"),
    ],
)
def test_sizes_of_logs_and_ground_truth_must_be_positive(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config([override], "collect")


def test_a_list_element_override_changes_that_element_only():
    cfg = load_config(["collect.behaviour[1].weight=2.5", "collect.behaviour[2].policy.temperature=0.5"])
    assert [b.weight for b in cfg.collect.behaviour] == [1.0, 2.5, 1.0]
    assert cfg.collect.behaviour[2].policy.temperature == 0.5 and cfg.collect.behaviour[2].policy.eps == 0.3
    assert cfg.collect.behaviour[0].policy.temperature == 0.5 and len(cfg.collect.behaviour) == 3


def test_a_user_config_dir_adds_experiments_and_extends_packaged_choices(tmp_path, capsys, monkeypatch):
    """`--config-dir`: the user's files first, the packaged ones below; a user's `agent/tiny.yaml` extends the
    packaged `tiny` by its own name and changes one value."""
    from adwm.cli import main

    monkeypatch.setenv("ADWM_CONFIG_DIR", "")  # main() puts the folder in the environment: restored after the test

    mine = tmp_path / "mine"
    (mine / "agent").mkdir(parents=True)
    (mine / "experiment").mkdir()
    (mine / "agent" / "tiny.yaml").write_text("extends: tiny\nlr: 0.005\n")
    (mine / "experiment" / "my_run.yaml").write_text("defaults: {env: builtin}\nenv: {max_steps: 7}\n")
    assert main(["config", "show", "--config-dir", str(mine), "experiment=my_run"]) == 0
    cfg = OmegaConf.create(capsys.readouterr().out)
    packaged = load_config(["agent=tiny"])
    assert cfg.experiment == "my_run" and cfg.env.max_steps == 7 and cfg.agent.lr == 0.005
    assert cfg.agent.variants == packaged.agent.variants and cfg.agent.model == packaged.agent.model
    assert main(["config", "show", "--config-dir", str(mine), "experiment=nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'nope'" in err and "'my_run'" in err and "'smoke'" in err  # both folders listed


def test_the_configs_ship_inside_the_package(tmp_path):
    """A wheel (what a non-editable install unpacks) holds every packaged config file."""
    import subprocess
    import sys
    import zipfile

    repo = Path(__file__).resolve().parents[1]
    for item in ("pyproject.toml", "README.md"):
        shutil.copy(repo / item, tmp_path / item)
    shutil.copytree(repo / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", "dist"],  # setuptools>=77 isolated
        cwd=tmp_path,
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("adwm-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("adwm/configs/")}
    packaged = {f"adwm/configs/{p.relative_to(config_dir())}" for p in config_dir().rglob("*.yaml")}
    assert packaged and shipped == packaged
