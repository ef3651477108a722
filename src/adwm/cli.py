"""The `adwm` command: `adwm <command> [experiment=NAME] [group=choice ...] [a.b=value ...]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

OVERRIDES_HELP = "experiment=NAME, group=choice (env, agent, policy, collect, family, ground_truth, encoder, trainer, logger) or a.b=value"

COMMANDS = {
    "config": (
        "Print the resolved configuration.",
        "`adwm config show [overrides]` composes defaults.yaml, the group files, the experiment (from --config-dir "
        "folders, then the packaged configs) and "
        "the overrides, validates them against the schema and prints the result as YAML.",
    ),
    "train-agent": (
        "Train one small LLM agent by behaviour cloning.",
        "Trains a byte-level BPE tokenizer and a tiny Llama-style model on gold demonstrations of the "
        "environment, for the variant `agent.name` (its data size and steps are in `agent.variants`), and "
        "saves it with save_pretrained to `<agent.dir>/<agent.name>`.",
    ),
    "collect": (
        "Collect behaviour logs (JSONL episodes) from a mixture of agents.",
        "Runs the agents of `collect.behaviour` (chosen per episode by weight) until `collect.out` holds "
        "`collect.n_episodes` episodes. Each episode is appended and flushed as it ends; rerunning after an "
        "interruption writes only the missing episodes.",
    ),
    "ground-truth": (
        "Measure the true value J of every policy in the family.",
        "Runs each policy of the family (the eps family around `policy` plus `family.off_path` and `family.optional`) on-policy "
        "for `ground_truth.n_episodes` episodes and writes J, its standard error and the returns to "
        "`ground_truth.out`. Policies already measured with the same settings are skipped.",
    ),
    "fit": (
        "Train the latent diffusion world model on episode logs.",
        "Jointly trains the observation encoder (`encoder`), the history encoder, the conditional denoiser "
        "(`world_model.denoiser`) and the reward, termination, action-posterior and proposal heads on "
        "`data.log`. Checkpoints go to `<run.fit>/checkpoints` (last.ckpt always; run.fit defaults to `<run.root>/fit`); `fit.resume=true` "
        "continues from last.ckpt; final metrics go to `<run.fit>/metrics.json`.",
    ),
    "project": (
        "Train the projector that lets an agent read world-model latents.",
        "Freezes the world model at `project.world_model` and the agent `policy`, and trains G_psi "
        "(`projector`) to map latents to soft tokens by distillation: the agent's distribution over "
        "the logged candidate actions when reading soft tokens must match its distribution when reading "
        "the observation text. One projector per (world model, agent backbone), cached under "
        "`<run.root>/project/`; held-out KL and top-1 agreement before and after go to its metrics.json.",
    ),
    "evaluate": (
        "Estimate J_hat for every policy of the family with the trained world model.",
        "For each policy (the eps family around `policy` plus `family.off_path` and `family.optional`): its projector "
        "(`adwm project`, cached per agent backbone), its continuation tail value, then "
        "`evaluate.simulate.n_rollouts` simulated rollouts from logged initial observations with the "
        "policy-guided sampler (`guidance.omega`, `guidance.eta`). Writes J_hat and a bootstrap CI per "
        "policy to `evaluate.out`, and Spearman, Kendall, regret@1 and nRMSE when the ground truth exists.",
    ),
    "ope": (
        "Estimate every policy of the family with the classic off-policy baselines.",
        "IS, PDIS, WIS, WPDIS (importance weights against the logged behaviour log-probs), DM (a regression "
        "of the logged return-to-go), FQE, DR and WDR (with the FQE action values) on `ope.log`, for the eps "
        "family around `policy` plus `family.off_path`, `family.optional` (`ope.estimators`, clipped variants via `ope.clip`). "
        "Writes each estimate with its effective sample size, flag and bootstrap CI to `ope.out`, and the "
        "family metrics per estimator when the ground truth exists.",
    ),
    "benchmark": (
        "Run ground truth, ADWM and every baseline on each cell and seed, and write the result tables.",
        "For each cell of `benchmark.cells` (its experiment and overrides) and each seed of `benchmark.seeds`, "
        "the main job under `<benchmark.out>/<cell>/seed<k>` (resumable); then estimates.csv, metrics.csv, "
        "a markdown table (rows: estimators; columns: cells; mean and bootstrap CI over seeds of Spearman, "
        "nRMSE and regret@1) and PNG plots in `benchmark.out`. Its path is printed last.",
    ),
    "grid": (
        "Run a grid of main jobs (override lists x seeds) and aggregate them into one table.",
        "`adwm grid experiments/<grid>.yaml [--workers N]`: every combination of the grid's axes and seeds is "
        "a main job in its own process (log in `<run>/log.txt`); runs share agents, logs and ground truth per "
        "seed and the world model, projectors and baselines per fit settings; finished runs are skipped on a "
        "rerun. With logger=wandb each finished run is a W&B run by its logger settings (group = grid name, "
        "tags from the overrides). Writes estimates.csv, metrics.csv, table.md and plots to the grid's folder "
        "(runs/grid/<name>), and a copy of the table to the grid's `report` path. Its path is printed last.",
    ),
    "evaluate-log": (
        "Estimate your own agents from your own log: no behaviour agent, no ground truth.",
        "`adwm evaluate-log data.log=<episodes.jsonl> env=<name> evaluate_log.agents=[<agent>,...]`: fits the "
        "world model on the log (no behaviour log-probabilities needed; logs without admissible lists are "
        "simulated free-form: the agent writes its action), then trains each agent's projector and simulates "
        "it. An agent is a model folder (save_pretrained), a .gguf file, or a Hugging Face name with "
        "hub=true. J_hat and its CI per agent accumulate in `evaluate_log.out` (default "
        "<run.dir>/estimates.json; the world model and projectors under run.dir); its path is printed last.",
    ),
    "credit": (
        "Per-step credit of logged episodes: which step lost an episode, by the agent's simulated value.",
        "`adwm credit data.log=<episodes.jsonl> [credit.agent=<agent>]`: for each step of the chosen episodes "
        "(`credit.episodes`, or the `credit.n_episodes` of lowest return), the agent's value V(s_t) simulated in "
        "the world of `evaluate.world` (normalised to [0, 1] by `credit.value_range` or the log's return range), "
        "the credit r_t + gamma V(s_t+1) - V(s_t) of the logged action and the value of the agent's preferred "
        "action; rows to `<credit.out>/credit.jsonl`, a plot per episode to `<credit.out>/plots`. Its path is printed last.",
    ),
    "quickstart": (
        "The main job end to end on the configured environment.",
        "Trains the agents of `agent.variants`, collects behaviour logs, measures ground truth for the "
        "family, prints a table and writes summary.json into `run.dir` (its path is printed last).",
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adwm",
        description="Off-policy evaluation of LLM agents with autoregressive diffusion world models.",
        epilog="Every command takes overrides: " + OVERRIDES_HELP,
    )
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (short, long) in COMMANDS.items():
        p = sub.add_parser(name, help=short, description=f"{short} {long}")
        p.add_argument(
            "--config-dir",
            action="append",
            default=[],
            metavar="DIR",
            help="a folder of your own config files (same layout as the packaged configs: <group>/<choice>.yaml, "
            "experiment/<name>.yaml), searched before the packaged ones; repeatable",
        )
        if name == "config":
            p.add_argument("action", choices=["show"], help="show: print the resolved configuration")
        if name == "grid":
            p.add_argument("spec", help="grid file, e.g. experiments/ablations.yaml")
            p.add_argument("--workers", type=int, default=None, help="worker processes (default: the file's)")
            p.add_argument(
                "--only",
                nargs="*",
                default=None,
                metavar="LABEL=VALUE",
                help="run only the matching runs, e.g. variant=full seed=0 (one machine of a W&B sweep)",
            )
            p.add_argument("--report", action="store_true", help="only aggregate the runs finished so far")
            continue
        p.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    return parser


# what each command writes: checked (kind, writable folder) before any work
_FILES, _DIRS = "file", "dir"
OUTPUTS = {
    "train-agent": [("agent.dir", _DIRS)],
    "collect": [("collect.out", _FILES)],
    "ground-truth": [("ground_truth.out", _FILES)],
    "fit": [("run.fit", _DIRS)],
    "project": [("project.dir", _DIRS)],
    "evaluate": [("evaluate.out", _FILES), ("project.dir", _DIRS)],
    "ope": [("ope.out", _FILES)],
    "benchmark": [("benchmark.out", _DIRS)],
    "evaluate-log": [("evaluate_log.out", _FILES), ("run.dir", _DIRS)],
    "credit": [("credit.out", _DIRS)],
}
OUTPUTS["quickstart"] = [
    *(o for c in ("train-agent", "collect", "ground-truth", "fit", "evaluate", "ope") for o in OUTPUTS[c]),
    ("run.dir", _DIRS),
]


def _check_outputs(command: str, cfg) -> None:
    from omegaconf import OmegaConf

    from adwm.runtime.paths import check_output_dir, check_output_file

    for key, kind in OUTPUTS.get(command, []):
        (check_output_file if kind == _FILES else check_output_dir)(OmegaConf.select(cfg, key), key)


# the commands that play episodes in the environment, which a log-only environment (env=log) cannot
PLAYS_EPISODES = ("train-agent", "collect", "ground-truth", "quickstart", "benchmark")


def _check_playable(command: str, cfg) -> None:
    from adwm.config import ConfigError
    from adwm.envs.registry import LOG_ONLY

    if cfg.env.name == LOG_ONLY and command in PLAYS_EPISODES:
        raise ConfigError(
            f"env.name: `adwm {command}` plays episodes, and env=log is a log with no environment behind it; "
            "expected a real environment, or a command that reads only the log (fit, evaluate-log, evaluate, ope, credit)"
        )


def _run(command: str, overrides: list[str]) -> None:
    from adwm.config import load_config

    cfg = load_config(overrides, command)
    # models load from local folders and files only, unless `hub=true` lets from_pretrained download
    os.environ["HF_HUB_OFFLINE"] = "0" if cfg.hub else "1"
    _check_playable(command, cfg)
    _check_outputs(command, cfg)
    result = _dispatch(command, cfg, overrides)
    if command != "config":  # the run's folder records what made it (after success: what made its results)
        from omegaconf import OmegaConf

        from adwm.runtime.provenance import save_run_config

        folder = cfg.benchmark.out if command == "benchmark" else cfg.run.dir
        save_run_config(folder, OmegaConf.to_yaml(cfg), command, overrides)
    if result is not None:
        print(result)  # the result's path: the last line of stdout


def _dispatch(command: str, cfg, overrides: list[str]):
    from adwm.config import ConfigError, to_object

    if command == "config":
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(cfg), end="")
        return None
    if command == "train-agent":
        from adwm.stages.pipeline import train_agents

        return train_agents(cfg, [cfg.agent.name])[cfg.agent.name]
    elif command == "collect":
        from adwm.stages.collect import collect

        return collect(to_object(cfg.collect), to_object(cfg.env), cfg.seed)
    elif command == "ground-truth":
        from adwm.evaluation.ground_truth import ground_truth_in_workers
        from adwm.runtime.parallel import resolve_workers

        for name, r in ground_truth_in_workers(cfg, resolve_workers(cfg.workers)).items():
            print(f"{name:<20} J={r['J']:.4f} se={r['se']:.4f} n={r['n']}")
        return cfg.ground_truth.out
    elif command == "fit":
        from adwm.stages.fit import fit

        # fit writes to the world model's folder, where evaluate and project look for it; a run.dir given
        # for fit would otherwise be ignored and the default world model overwritten
        if any(o.split("=", 1)[0].lstrip("+") == "run.dir" for o in overrides) and cfg.run.dir != cfg.run.fit:
            raise ConfigError(
                f"command line: run.dir={cfg.run.dir}: `adwm fit` writes to run.fit ({cfg.run.fit}); "
                "set run.fit instead"
            )
        cfg.run.dir = cfg.run.fit
        return fit(cfg)
    elif command == "project":
        from adwm.stages.project import project

        return project(cfg)
    elif command == "evaluate":
        from adwm.runtime.parallel import resolve_workers
        from adwm.stages.evaluate import evaluate_in_workers

        return evaluate_in_workers(cfg, resolve_workers(cfg.workers))
    elif command == "ope":
        from adwm.stages.ope import run_baselines

        return run_baselines(cfg)
    elif command == "benchmark":
        from adwm.sweeps.benchmark import benchmark

        return benchmark(cfg, overrides)
    elif command == "evaluate-log":
        from adwm.stages.evaluate_log import evaluate_log

        return evaluate_log(cfg, overrides)
    elif command == "credit":
        from adwm.stages.credit import credit

        return credit(cfg)
    elif command == "quickstart":
        from adwm.stages.pipeline import quickstart

        return quickstart(cfg, overrides)


def _config_dirs(argv: list[str]) -> tuple[list[str], list[str]]:
    """`--config-dir DIR` (or `--config-dir=DIR`) anywhere on the command line, and the other arguments
    (argparse would not take overrides that follow it after `config show`)."""
    dirs, rest, k = [], [], 0
    while k < len(argv):
        if argv[k] == "--config-dir" and k + 1 < len(argv):
            dirs.append(argv[k + 1])
            k += 2
            continue
        if argv[k].startswith("--config-dir="):
            dirs.append(argv[k].split("=", 1)[1])
        else:
            rest.append(argv[k])
        k += 1
    return dirs, rest


def main(argv: list[str] | None = None) -> int:
    dirs, argv = _config_dirs(list(sys.argv[1:] if argv is None else argv))
    args = _parser().parse_args(argv)
    if dirs:  # in the environment: a grid's run processes search the same folders
        from adwm.config.compose import CONFIG_DIR_ENV

        given = [str(Path(d).resolve()) for d in dirs]
        os.environ[CONFIG_DIR_ENV] = os.pathsep.join([*given, *filter(None, [os.environ.get(CONFIG_DIR_ENV)])])
    from adwm.runtime.parallel import PARENT_ENV, quiet_known_warnings, watch_parent

    quiet_known_warnings()
    if os.environ.get(PARENT_ENV, "").isdigit():  # a grid's run: it ends with the grid
        watch_parent(int(os.environ.pop(PARENT_ENV)))
    from adwm.config import ConfigError
    from adwm.data.schema import LogFormatError

    try:
        if args.command == "grid":
            from adwm.sweeps.grid import run_grid

            print(run_grid(args.spec, args.workers, args.only, args.report))
        else:
            _run(args.command, args.overrides)
    except (ConfigError, LogFormatError, FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"adwm {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a permission changed while running: name the file, keep what exists
        where = f"'{err.filename}': " if err.filename else ""
        print(f"adwm {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
