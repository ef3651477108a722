"""`adwm grid` and `adwm benchmark` on the smoke config: shared stages, tables, resuming after a kill."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from omegaconf import OmegaConf

from adwm.cli import main
from adwm.config import load_config
from adwm.sweeps.grid import _phases, expand, load_spec

ESTIMATORS = ["adwm", "adwm_sim", "is", "pdis", "wis", "wpdis", "dm", "dr", "wdr", "fqe"]
ESTIMATORS += ["adwm_dr", "adwm_wdr", "adwm_magic"]  # the world model as the model part
ESTIMATORS += ["is_est", "pdis_est", "wis_est", "wpdis_est", "dr_est", "wdr_est"]  # on the estimated behaviour
ESTIMATORS += ["adwm_dr_est", "adwm_wdr_est", "adwm_magic_est"]


def _grid_file(tmp_path, workers: int = 1, logger: str = "") -> str:
    spec = f"""
name: tiny
out: {tmp_path / "grid"}
overrides: [experiment=smoke, ope.ci_resamples=50{logger}]
axes:
  variant:
    full: []
    no_action_guidance: [guidance.omega=0]
seeds: [0]
workers: {workers}
report: {tmp_path / "docs" / "tiny.md"}
"""
    path = tmp_path / "tiny.yaml"
    path.write_text(spec)
    return str(path)


def test_grid_shares_stages_between_runs_that_differ_only_in_the_estimator(tmp_path):
    runs = expand(load_spec(_grid_file(tmp_path)))
    assert [r.id for r in runs] == ["full-seed0", "no_action_guidance-seed0"]
    assert runs[0].data_key == runs[1].data_key and runs[0].fit_key == runs[1].fit_key
    assert [[r.id for r in w] for w in _phases(runs)] == [["full-seed0"], ["no_action_guidance-seed0"]]
    other = expand(load_spec(_grid_file(tmp_path)))
    assert [r.overrides for r in other] == [r.overrides for r in runs]  # keys do not depend on the run folder


@pytest.mark.ci
@pytest.mark.slow  # ~45 s: several smoke main jobs; in the CI selection
def test_grid_kill_and_rerun_completes_only_the_missing_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the grid's own logger.mode=disabled must keep W&B off
    spec = _grid_file(tmp_path, logger=", logger=wandb, logger.mode=disabled")
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "adwm.cli", "grid", spec],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = tmp_path / "grid" / "runs" / "full-seed0" / "grid_run.json"
    deadline = time.time() + 300
    while not first.is_file() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert first.is_file(), "the first grid run did not finish"
    os.killpg(proc.pid, signal.SIGKILL)  # the second run is in flight (or not started)
    proc.wait()
    assert not (tmp_path / "grid" / "table.md").is_file()

    assert main(["grid", spec]) == 0
    logs = {
        r: (tmp_path / "grid" / "runs" / r / "log.txt").read_text() for r in ("full-seed0", "no_action_guidance-seed0")
    }
    assert logs["full-seed0"].count("$ adwm quickstart") == 1  # finished before the kill: not rerun
    table = (tmp_path / "grid" / "table.md").read_text()
    assert (tmp_path / "docs" / "tiny.md").read_text() == table
    assert "| adwm (full) |" in table and "| adwm (no_action_guidance) |" in table
    assert "| adwm_sim (full) |" in table  # the uncalibrated simulated value, per variant too
    made = json.loads((tmp_path / "grid" / "runs" / "full-seed0" / "quickstart" / "summary.json").read_text())
    assert made["commit"] and f"Every run was made at commit `{made['commit'][:12]}" in table
    for est in ESTIMATORS[2:]:
        assert f"| {est} |" in table
    rows = list(csv.DictReader(open(tmp_path / "grid" / "estimates.csv")))
    assert len(rows) == 2 * 7 * len(ESTIMATORS)  # runs x policies x estimators
    for name in ("spearman.png", "nrmse.png", "regret_at_1.png", "scatter.png"):
        assert (tmp_path / "grid" / name).stat().st_size > 1000
    assert not list(tmp_path.glob("**/wandb"))  # logger.mode=disabled: no W&B run, no run files
    # a third call finds everything finished
    before = (tmp_path / "grid" / "runs" / "no_action_guidance-seed0" / "log.txt").read_text()
    assert main(["grid", spec]) == 0
    assert (tmp_path / "grid" / "runs" / "no_action_guidance-seed0" / "log.txt").read_text() == before


def test_a_grid_table_says_which_commits_made_its_runs():
    from adwm.sweeps.tables import commits_line

    a, b = "0123456789abcdef0123", "fedcba9876543210fedc"
    assert commits_line([a, a]) == "Every run was made at commit `0123456789ab`."
    assert commits_line([a, b + "-dirty", a, None]) == (
        "The runs were made at different commits: `0123456789ab` (2 runs), `fedcba987654-dirty` (1 run), an "
        "unknown commit (1 run); the code changed between them."
    )


def test_a_grid_table_tells_commits_that_differ_only_in_generated_tables(tmp_path):
    from adwm.sweeps.tables import commits_line

    def git(*args):
        out = subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    shas = []
    for path, text in [("src/a.py", "x = 1\n"), ("docs/results/t.md", "table\n"), ("src/a.py", "x = 2\n")]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", path)
        shas.append(git("rev-parse", "HEAD"))
    first, docs_only, code = shas
    assert commits_line([first, docs_only, docs_only], root=tmp_path) == (
        f"The runs were made at different commits: `{first[:12]}` (1 run), `{docs_only[:12]}` (2 runs); between "
        "them only the generated tables and figures (docs/results and benchmarks/results) changed, no code or "
        "config."
    )
    assert commits_line([first, code], root=tmp_path).endswith("; the code changed between them.")
    assert commits_line([docs_only, code], root=tmp_path).endswith("; the code changed between them.")
    assert commits_line([first, docs_only + "-dirty"], root=tmp_path).endswith("; the code changed between them.")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: g\nseeds: []\n", "seeds: expected at least one seed"),
        ("name: g\nworkers: 0\n", "workers: expected >= 1"),
        ("name: g\naxes: {variant: {}}\n", "axes.variant: expected at least one named value"),
        ("name: g\nsurprise: 1\n", "surprise"),
    ],
)
def test_bad_grid_files_are_named(tmp_path, capsys, text, message):
    path = tmp_path / "g.yaml"
    path.write_text(text)
    assert main(["grid", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err


def test_missing_grid_file(capsys, tmp_path):
    assert main(["grid", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.ci
@pytest.mark.slow  # ~55 s: two cells of smoke main jobs; in the CI selection
def test_benchmark_writes_tables_and_plots_per_cell(tmp_path, capsys):
    out = tmp_path / "bench"
    cells = "benchmark.cells=[{name: a}, {name: b, overrides: ['family.eps=[0.0,1.0]']}]"
    assert (
        main(
            [
                "benchmark",
                "experiment=smoke",
                f"benchmark.out={out}",
                "benchmark.seeds=[0]",
                cells,
                "ope.ci_resamples=50",
            ]
        )
        == 0
    )
    table = capsys.readouterr().out.strip().splitlines()[-1]
    text = open(table).read()
    assert "| estimator | a | b |" in text and "resampling unit is the seed" in text
    spearman = text.split("## Spearman")[1].split("\n| ")[2:4]  # the first two estimator rows
    assert spearman[0].startswith("adwm_sim |") and spearman[1].startswith("adwm |")  # uncalibrated first
    assert "`adwm_sim` is ADWM uncalibrated" in text
    assert "> Part of `adwm benchmark experiment=smoke" in text  # cells and a seed of the command line's choosing
    rows = list(csv.DictReader(open(out / "estimates.csv")))
    assert len(rows) == (7 + 4) * len(ESTIMATORS)  # cell a: 7 policies, cell b: 4
    assert {r["cell"] for r in rows} == {"a", "b"}
    metrics = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(metrics) == 2 * len(ESTIMATORS) and "regret_at_3" in metrics[0]
    for name in ("spearman.png", "scatter_a.png", "scatter_b.png"):
        assert (out / name).stat().st_size > 1000
    assert json.loads((out / "runs" / "b-seed0" / "quickstart" / "summary.json").read_text())["seed"] == 0
    # the log's overlap with each cell's family: the median share of effective episodes, from the summaries
    overlap = {r["cell"]: r for r in csv.DictReader(open(out / "overlap.csv"))}
    summary = json.loads((out / "runs" / "a-seed0" / "quickstart" / "summary.json").read_text())
    shares = sorted(p["ess"]["is"] / p["n_episodes"] for p in summary["policies"])
    assert float(overlap["a"]["ess_is"]) == pytest.approx(shares[3])  # 7 policies: the 4th
    assert 0 < float(overlap["b"]["ess_is_est"]) <= 1
    assert "## Overlap of the log with each family" in text and "| a | " in text.split("## Overlap")[1]
    # each cell's world model's fidelity, beside the controls of its own log
    fidelity = text.split("## Fidelity of each world model")[1].split("\n## ")[0]
    for row in ("learned (a)", "stay (a)", "nearest (a)", "learned (b)", "stay (b)", "nearest (b)"):
        assert f"| {row} |" in fidelity
    assert "| snap_ceiling (a) |" in fidelity and "| guided_analogy (b) |" in fidelity
    budgets = text.split("## Cells and budgets")[1].split("\n## ")[0]  # each cell's budgets and wall time a seed
    assert "| a | builtin | " in budgets and "benchmark.only=[b]`" in budgets
    assert "| wall |" in text and "The 2 finished runs took " in text
    fit = json.loads(next((out / "shared").glob("seed0-*/fit-*/metrics.json")).read_text())["metrics"]
    rows = {r["row"]: r for r in csv.DictReader(open(out / "fidelity.csv"))}
    assert float(rows["learned (a)"]["state_acc@1"]) == pytest.approx(fit["fidelity/state_acc@1"])
    # a second seed asked for, but only the report: no run starts and the table says what it holds
    report = ["benchmark", "experiment=smoke", f"benchmark.out={out}", "benchmark.seeds=[0, 1]", cells]
    report.append("ope.ci_resamples=50")  # the runs' own overrides, or they are other runs
    assert main([*report, "benchmark.report_only=true"]) == 0
    text = open(capsys.readouterr().out.strip().splitlines()[-1]).read()
    assert not (out / "runs" / "a-seed1").exists() and "2 of 4 runs finished so far" in text
    assert "benchmark.report_only" not in text


def test_fidelity_table_means_each_world_over_seeds():
    from adwm.sweeps.report import FIDELITY_METRICS, fidelity_rows, mean_ci_table

    def metrics(acc, stay):
        m = {f"fidelity/state_acc@{k}": acc for k in (1, 5, 10)} | {"fidelity/return_corr": 0.5}
        m |= {f"fidelity/stay_state_acc@{k}": stay for k in (1, 5, 10)}
        return m | {f"fidelity/nearest_state_acc@{k}": 0.3 for k in (1, 5, 10)}

    assert fidelity_rows({"final/x": 1.0}, "full", 0) == []  # a fit that measured none
    rows = fidelity_rows(metrics(0.2, 0.9), "full", 0) + fidelity_rows(metrics(0.4, 0.7), "full", 1)
    rows += fidelity_rows(metrics(0.6, 0.0), "other", 0, controls=False)
    assert [r["row"] for r in rows].count("stay") == 2 and len(rows) == 7  # no analogy metrics: no row
    with_analogy = fidelity_rows(
        metrics(0.2, 0.9) | {f"fidelity/analogy_state_acc@{k}": 0.8 for k in (1, 5, 10)}, "f", 0
    )
    assert [r["row"] for r in with_analogy] == ["learned (f)", "stay", "nearest", "analogy"]
    table = mean_ci_table(rows, "row", FIDELITY_METRICS, 200, 0.95, "world").splitlines()
    assert table[0].startswith("| world | state acc @1 | state acc @5 | state acc @10 | return corr |")
    learned = next(line for line in table if line.startswith("| learned (full) |")).split(" | ")
    assert learned[1].startswith("0.30 [0.20, 0.40]") and learned[4].startswith("0.50 [0.50, 0.50]")
    assert learned[5] == "" and learned[6] == " |"  # end rates not measured: blank
    assert next(line for line in table if line.startswith("| stay |")).split(" | ")[1].startswith("0.80")
    assert next(line for line in table if line.startswith("| learned (other) |")).split(" | ")[1].startswith("0.60")


REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_committed_ablation_grid_and_its_sweep_agree():
    from omegaconf import OmegaConf

    spec = load_spec(REPO / "experiments" / "ablations.yaml")
    runs = expand(spec)
    variants = list(spec.axes["variant"])
    assert variants[0] == "full" and spec.seeds == [0, 1, 2] and len(runs) == 15 * 3
    # every switch of the ablation node is flipped by some variant (the grid over `ablation.*` is the study)
    from dataclasses import fields

    from adwm.config.schema import AblationConfig

    flipped = {t.split("=")[0] for r in runs for t in r.tags if t.startswith("ablation.")}
    assert flipped == {f"ablation.{f.name}" for f in fields(AblationConfig)}
    assert {"guidance.continuation=full", "guidance.method=resample"} <= {t for r in runs for t in r.tags}
    # the estimator ablations reuse the full method's world model; the swaps fit their own
    fit = {r.labels["variant"]: r.fit_key for r in runs if r.labels["seed"] == 0}
    assert fit["no_action_guidance"] == fit["continuation"] == fit["projector"] == fit["full"]
    assert fit["heads_rewards"] == fit["world_diffusion"] == fit["full"]
    assert fit["continuation_resample"] == fit["continuation_full"] == fit["full"]
    assert fit["world_oracle"] == fit["world_nearest"] == fit["world_stay"] == fit["world_analogy"] == fit["full"]
    assert len({fit[v] for v in ("full", "encoder_minilm", "backbone_transformer", "frozen_encoder")}) == 4
    # step budgets only: a wall-clock cap would make the table depend on the machine's speed and load
    assert not [o for r in runs for o in r.overrides if "max_minutes" in o or "encoder_share" in o]
    # uncalibrated everywhere but `full` (calibration simulates the behaviour agents)
    calibrated = [v for v, o in spec.axes["variant"].items() if "evaluate.calibration=none" not in o]
    assert calibrated == ["full"]
    sweep = OmegaConf.to_container(OmegaConf.load(REPO / "experiments" / "sweeps" / "ablations.yaml"))
    assert sweep["parameters"]["variant"]["values"] == variants
    assert sweep["parameters"]["seed"]["values"] == spec.seeds
    assert sweep["command"][1:] == ["grid", "experiments/ablations.yaml", "--only", "${args_no_hyphens}"]


def test_results_runs_reach_wandb_only_by_their_logger_settings(tmp_path, monkeypatch):
    import wandb

    from adwm.runtime.tracking import log_results_run

    calls = []

    class FakeRun:
        def log(self, data):
            calls[-1]["logged"].update(data)

        def finish(self):
            calls[-1]["finished"] = True

    def init(**kwargs):
        calls.append({**kwargs, "logged": {}})
        return FakeRun()

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    summary = {
        "metrics": {"adwm": {"spearman": 0.5}},
        "policies": [{"name": "p", "J_true": 0.1, "estimates": {"adwm": 0.2}}],
        "timings_s": {"total": 1.0},
    }

    def config(logger: str) -> dict:
        cfg = load_config(["experiment=smoke", f"run.root={tmp_path}", *logger.split()], "quickstart")
        return OmegaConf.to_container(cfg, resolve=True)

    log_results_run(config("logger=none"), summary, None, "quickstart", "r0")
    assert calls == []  # logger=none: no W&B run
    grid_run = 'logger.group=g logger.tags=["variant=full","seed=0"]'
    log_results_run(
        config(f"logger=wandb logger.project=p1 logger.entity=team logger.mode=disabled {grid_run}"),
        summary,
        None,
        "quickstart",
        "r0",
    )
    (call,) = calls
    assert (call["project"], call["entity"], call["mode"], call["group"]) == ("p1", "team", "disabled", "g")
    assert call["tags"] == ["variant=full", "seed=0"] and call["job_type"] == "quickstart"
    assert call["config"]["world_model"]["d_action"] == 16
    assert call["logged"]["adwm/spearman"] == 0.5 and "estimates" in call["logged"] and call["finished"]


def test_committed_heldout_grid_reports_only_unseen_seeds_on_one_world_model_a_seed():
    spec = load_spec(REPO / "experiments" / "heldout.yaml")
    runs = expand(spec)
    assert spec.seeds == [3, 4, 5, 6, 7] and not set(spec.seeds) & {0, 1, 2}  # the defaults were tuned on 0-2
    assert len({r.fit_key for r in runs}) == len(spec.seeds)  # every variant reads the full method's world model
    calibrated = [v for v, o in spec.axes["variant"].items() if "evaluate.calibration=none" not in o]
    assert calibrated == ["full"]
    assert {"world_oracle", "world_nearest", "world_stay", "world_analogy", "projector"} <= set(spec.axes["variant"])
    assert {"no_action_guidance", "heads_rewards", "world_diffusion", "continuation"} <= set(spec.axes["variant"])


@pytest.mark.parametrize("name", ["scaling", "scaling_textworld"])
def test_committed_budget_grids_share_the_log_and_fit_one_world_model_a_budget(name):
    spec = load_spec(REPO / "experiments" / f"{name}.yaml")
    runs = expand(spec)
    assert len({r.data_key for r in runs}) == len(spec.seeds)  # agents, log and ground truth made once a seed
    assert len({r.fit_key for r in runs}) == len(runs)
    assert "evaluate.calibration=none" in spec.overrides and not set(spec.seeds) & {0, 1, 2}
    for overrides in spec.axes["budget"].values():
        assert all(o.split(".")[0] in ("fit", "data", "ope") for o in overrides)


def test_committed_regimes_benchmark_has_a_heuristic_family_cell_and_a_long_horizon_cell():
    from adwm.sweeps.benchmark import benchmark_grid

    spec = benchmark_grid(load_config(["experiment=regimes"], "benchmark"), ["experiment=regimes"])
    cells = {name: load_config([*o, "seed=0"], "quickstart") for name, o in spec.axes["cell"].items()}
    assert list(cells) == [
        "builtin_heuristic",
        "builtin_long",
        "textworld_long",
        "scienceworld_long",
        "shop",
        "multihop",
        "shop_heuristic",
        "multihop_heuristic",
    ]
    for name in ("builtin_heuristic", "shop_heuristic", "multihop_heuristic"):
        behaviour = [b.policy for b in cells[name].collect.behaviour]
        assert {p.kind for p in behaviour} == {"heuristic"} and all(p.eps == 0 for p in behaviour)  # no uniform share
        assert cells[name].evaluate.calibration == "none"
    for name in ("shop", "multihop"):  # the same world and budgets, another log
        assert cells[f"{name}_heuristic"].env == cells[name].env and cells[f"{name}_heuristic"].fit == cells[name].fit
        assert cells[f"{name}_heuristic"].collect.n_episodes == cells[name].collect.n_episodes
    for name in ("builtin_heuristic", "builtin_long"):  # the budget the curve justifies, stated in the cell
        assert (cells[name].fit.max_steps, cells[name].fit.encoder_steps) == (2800, 700)
    tw_fit = load_config(["experiment=textworld_cooking"], "quickstart").fit  # its own curve's best point
    assert (tw_fit.max_steps, tw_fit.encoder_steps) == (2800, 700)
    # textworld_long keeps the budget its table was made at
    assert (cells["textworld_long"].fit.max_steps, cells["textworld_long"].fit.encoder_steps) == (1400, 350)
    default = load_config([], "quickstart")
    # the built-in default (chosen on the demo's seeds 0-2) is not yet measured on these cells: their tables'
    assert (default.evaluate.world, default.evaluate.guided_analogy.rewards) == ("guided_analogy", "edits")
    assert {c.evaluate.world for c in cells.values()} == {"diffusion"}
    assert cells["builtin_long"].env.max_steps == 2 * default.env.max_steps
    assert cells["builtin_long"].env.builtin.min_gold_steps >= default.env.builtin.max_gold_steps  # the longest before
    tw, tw_long = load_config(["experiment=textworld_cooking"], "quickstart").env, cells["textworld_long"].env
    assert tw_long.name == "textworld" and tw_long.max_steps == 2 * tw.max_steps
    assert all(tw_long.textworld.cooking[k] > tw.textworld.cooking[k] for k in ("recipe", "take", "go"))
    sw_long = cells["scienceworld_long"].env
    assert sw_long.name == "scienceworld" and not any(t.startswith("find-") for t in sw_long.scienceworld.tasks)
    assert sw_long.max_steps >= 3 * load_config(["experiment=scienceworld"], "quickstart").env.max_steps
    assert cells["shop"].env.name == "shop" and cells["multihop"].env.name == "multihop"
    assert spec.report == "docs/results/regimes.md"


def test_a_benchmark_of_some_cells_or_seeds_says_which_part_of_its_experiment_it_holds():
    from adwm.sweeps.benchmark import benchmark_grid

    whole = ["experiment=regimes"]
    assert benchmark_grid(load_config(whole, "benchmark"), whole).note is None
    cli = [*whole, "benchmark.cells=[{name: builtin_heuristic, overrides: [collect=heuristic_players]}]"]
    note = benchmark_grid(load_config(cli, "benchmark"), cli).note
    assert note.startswith("Part of `adwm benchmark experiment=regimes`: cells ['builtin_heuristic'] of [")
    assert "(not in this table: ['builtin_long', 'textworld_long', 'scienceworld_long', 'shop', 'multihop', " in note
    assert note.endswith("seeds [0, 1, 2] of [0, 1, 2].")
    cli = [*whole, "benchmark.seeds=[0]"]
    note = benchmark_grid(load_config(cli, "benchmark"), cli).note
    assert "not in this table" not in note and note.endswith("seeds [0] of [0, 1, 2].")
    # every cell and seed, named on the command line: the whole benchmark
    cli = [*whole, "benchmark.seeds=[2, 1, 0]"]
    assert benchmark_grid(load_config(cli, "benchmark"), cli).note is None


def test_benchmark_only_runs_the_cells_it_names_and_says_how_to_run_each_alone():
    from adwm.sweeps.benchmark import benchmark_grid

    cli = ["experiment=regimes", "benchmark.only=[shop, builtin_long]"]
    spec = benchmark_grid(load_config(cli, "benchmark"), cli)
    assert list(spec.axes["cell"]) == ["builtin_long", "shop"]  # the experiment's order
    assert spec.note.startswith("Part of `adwm benchmark experiment=regimes`: cells ['builtin_long', 'shop'] of [")
    # the same cells' runs as the whole benchmark's (same overrides, so a later full run reuses them)
    whole = benchmark_grid(load_config(["experiment=regimes"], "benchmark"), ["experiment=regimes"])
    assert spec.axes["cell"]["shop"] == whole.axes["cell"]["shop"]
    assert whole.alone["shop"] == "adwm benchmark experiment=regimes benchmark.only=[shop]"
    assert spec.alone["builtin_long"] == "adwm benchmark experiment=regimes benchmark.only=[builtin_long]"
    with pytest.raises(ValueError, match=r"benchmark.only: expected names of benchmark.cells \(\['builtin_heuristic'"):
        load_config(["experiment=regimes", "benchmark.only=[shops]"], "benchmark")


def test_a_cells_budgets_and_wall_time_are_read_from_its_runs():
    from adwm.sweeps.report import budget_row, budget_table, timing_table, wall_line

    cfg = load_config(["experiment=regimes", "collect=heuristic_players"], "quickstart")
    row = budget_row("h", cfg, [600.0, 720.0], "adwm benchmark experiment=regimes benchmark.only=[h]")
    assert row["environment"] == "builtin" and row["episode steps"] == cfg.env.max_steps == 30
    assert row["logged episodes"] == 600 and row["rollouts a policy"] == cfg.evaluate.simulate.n_rollouts
    assert row["behaviour agents"] == "heuristic_t0.3, heuristic_t1" and row["wall a seed (min)"] == "11"
    assert row["run alone"] == "`adwm benchmark experiment=regimes benchmark.only=[h]`"
    lines = budget_table([row]).splitlines()
    assert lines[0].startswith("| cell | environment | episode steps |") and lines[2].startswith("| h | builtin | 30 |")
    timings = [{"cell": "h", "seed": 0, "fit": 10.0, "wall": 600.0}, {"cell": "h", "seed": 1, "fit": 12.0}]
    assert timing_table(timings).splitlines()[0] == "| cell | seed | fit | wall |"  # wall last
    assert wall_line(timings).startswith("The 1 finished runs took 0.2 h of wall time in all (600 s")
    assert wall_line([{"cell": "h", "seed": 0, "fit": 1.0}]) == ""


def test_overlap_is_the_median_share_of_effective_episodes_over_the_family():
    from adwm.sweeps.report import OVERLAP_METRICS, mean_ci_table, overlap_row

    def policy(ess, ess_est):
        return {"n_episodes": 200, "ess": {"is": ess, "is_est": ess_est}}

    summary = {"policies": [policy(2.0, 1.0), policy(20.0, 1.0), policy(100.0, 3.0)]}
    row = overlap_row(summary, {"cell": "a", "seed": 0})
    assert row == {"cell": "a", "seed": 0, "ess_is": pytest.approx(0.1), "ess_is_est": pytest.approx(0.005)}
    assert overlap_row({"policies": [{"name": "p"}]}, {"cell": "a"}) is None  # a run without baselines
    other = overlap_row({"policies": [policy(60.0, 2.0)]}, {"cell": "a", "seed": 1})
    table = mean_ci_table([row, other], "cell", OVERLAP_METRICS, 200, 0.95)
    assert table.splitlines()[2].startswith("| a | 0.20 [0.10, 0.30] | 0.01 [")


def test_a_plot_takes_an_interval_whose_ends_differ_from_the_mean_by_rounding(tmp_path):
    """Five seeds that agree (the oracle's Spearman 0.96 on each): the bootstrap interval's ends differ from
    the mean by a rounding error on either side, which matplotlib refuses as a negative error bar."""
    import numpy as np

    from adwm.evaluation.bootstrap import mean_interval
    from adwm.sweeps.report import plot_metric

    values = [27 / 28] * 5
    low, high = mean_interval(values, 2000, 0.95, 0)
    mean = float(np.mean(values))
    agg = {("oracle",): {"spearman": {"mean": mean, "low": max(low, mean + 1e-16), "high": high}}}
    plot_metric(agg, 0, None, "spearman", tmp_path / "spearman.png")
    assert (tmp_path / "spearman.png").stat().st_size > 0
