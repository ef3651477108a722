"""The configuration schema: one dataclass tree gathered from the stages' own config dataclasses.

`OmegaConf.structured(AppConfig)` validates every key and type at load time (adwm.config.compose); each
stage's dataclass checks its own values in `__post_init__`, so every command rejects a bad value the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adwm.data.config import DataConfig
from adwm.encoders.config import EncoderConfig
from adwm.envs.registry import EnvConfig
from adwm.evaluation.config import GroundTruthConfig
from adwm.evaluation.family import FamilyConfig
from adwm.guidance.config import GuidanceConfig
from adwm.models.config import ProjectorConfig
from adwm.models.world_model.config import WorldModelConfig
from adwm.ope.config import OPEConfig
from adwm.policies.config import PolicyConfig
from adwm.runtime.checks import one_of, require, safe_name
from adwm.runtime.config import LoggerConfig, TrainerConfig
from adwm.simulation.config import world_spec
from adwm.stages.config import (
    AgentConfig,
    CollectConfig,
    CreditConfig,
    EvaluateConfig,
    EvaluateLogConfig,
    FitConfig,
    ProjectConfig,
)

READERS = ("logged", "decoded", "projector")  # ablation.reader: how the agent reads a simulated state


@dataclass
class AblationConfig:
    """Every switch of the method in one block, each mapped to the settings it changes (`ablation_settings`),
    so a grid over `ablation.*` is the ablation study. The defaults are the default method; where one departs
    from the paper's full method (the projector, continuation), docs/decisions.md says why."""

    action_guidance: bool = True  # false: guidance.omega = 0, the action-free prior P(z'|h)
    # true: Theorem 1's continuation factor, guidance.eta = 1 where it is 0 (and evaluate.world=diffusion where
    # the world's agents read text, which has no continuation from latents)
    continuation: bool = False
    # how the agent reads a simulated state (evaluate.world=diffusion where the world's agents read text):
    # logged: the text of the nearest logged state; decoded: the text the world model's decoder writes (the
    # generative simulator: evaluate.diffusion.snap=false); projector: soft tokens (the paper's G_psi)
    reader: str = "logged"
    joint_encoder: bool = True  # false: the encoder stays frozen during `adwm fit`
    # false: the heads pay each step instead of the log's own outcomes (evaluate.guided_analogy.rewards=heads)
    log_rewards: bool = True
    world: str = ""  # a name of simulation/config.py's WORLDS sets evaluate.world; "": the environment's own

    def __post_init__(self) -> None:
        if self.world:
            world_spec(self.world, "ablation.world")
        one_of(self.reader, "ablation.reader", READERS)


def ablation_settings(ablation, world: str) -> dict[str, object]:
    """The dotted config keys (and values) that the switches of `ablation` (an `AblationConfig` or its
    config node) set in a config whose `evaluate.world` is `world`; `reader` and `joint_encoder` are read
    by the stages themselves."""
    out: dict[str, object] = {}
    if ablation.world:
        world = out["evaluate.world"] = ablation.world
    if (ablation.continuation or ablation.reader != "logged") and not world_spec(world).reads_latents:
        out["evaluate.world"] = "diffusion"
    if ablation.reader == "decoded":  # the fit trains the decoder; simulation reads the unsnapped sample
        out["world_model.decoder.enabled"] = True
        out["evaluate.diffusion.snap"] = False
    if not ablation.action_guidance:
        out["guidance.omega"] = 0.0
    if ablation.continuation:
        out["guidance.eta"] = 1.0
    if not ablation.log_rewards:
        out["evaluate.guided_analogy.rewards"] = "heads"
    return out


@dataclass
class CellConfig:
    name: str = "builtin"  # column name in the tables; also the cell's folder
    experiment: str | None = None  # the experiment file this cell composes from (None: the benchmark's own)
    overrides: list[str] = field(default_factory=list)  # further deltas of this cell: group=choice or a.b=value


@dataclass
class BenchmarkConfig:
    """`adwm benchmark`: a grid whose axis is the cell (adwm.sweeps.benchmark)."""

    cells: list[CellConfig] = field(default_factory=lambda: [CellConfig()])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    out: str = "runs/benchmark/${experiment}"
    ci_resamples: int = 2000  # bootstrap resamples of each metric's mean over seeds (unit: seed)
    ci_level: float = 0.95
    report: str | None = None  # also copy the table here (e.g. docs/results/<cell>.md)
    report_only: bool = False  # aggregate the runs finished so far (the table says how many) without starting any
    only: list[str] = field(default_factory=list)  # run (and table) only these cells, by name; empty: every cell

    def __post_init__(self) -> None:
        names = [c.name for c in self.cells]
        for k, name in enumerate(names):
            safe_name(name, f"benchmark.cells[{k}].name")
        require(len(set(names)) == len(names), "benchmark.cells", names, "unique cell names")
        unknown = [n for n in self.only if n not in names]
        require(not unknown, "benchmark.only", self.only, f"names of benchmark.cells ({names})")
        require(bool(self.seeds), "benchmark.seeds", self.seeds, "at least one seed")
        require(self.ci_resamples >= 1, "benchmark.ci_resamples", self.ci_resamples, ">= 1")
        require(0 < self.ci_level < 1, "benchmark.ci_level", self.ci_level, "a value in (0, 1)")


@dataclass
class RunConfig:
    root: str = "runs/${experiment}/seed${seed}"  # everything a run (experiment and seed) makes lives under here
    dir: str = "${run.root}/${command}"  # this command's outputs
    fit: str = "${run.root}/fit"  # the world model's folder; a grid shares it between runs that differ only later


@dataclass
class AppConfig:
    experiment: str = "default"
    command: str = "config"
    seed: int = 0  # seeds training, sampling and data splits; every reported number is reproducible from it
    # worker processes for a stage's independent jobs (runtime/parallel.py): in `adwm quickstart` (and
    # `benchmark`) the agents, the log beside the ground-truth policies, the projectors and estimates beside
    # the baselines; in `adwm ground-truth` and `adwm evaluate` their policies. 0 = one per CPU core,
    # 1 = every job in this process; each worker runs torch on its share of the cores
    workers: int = 0
    # let Hugging Face names of models download (from_pretrained); off: only local folders and files load,
    # and a hub name is refused with a message that says so
    hub: bool = False
    # every agent's and the simulator's device at once (evaluate.device, policy.device, each family and
    # behaviour agent's device): cpu, cuda[:k], mps or auto; "" = each key's own. Training: `trainer=gpu`
    device: str = ""
    run: RunConfig = field(default_factory=RunConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # the evaluated agent; the eps family is built around it
    collect: CollectConfig = field(default_factory=CollectConfig)
    data: DataConfig = field(default_factory=DataConfig)  # logged transitions for world-model training
    encoder: EncoderConfig = field(default_factory=EncoderConfig)  # observation text -> latent tokens
    world_model: WorldModelConfig = field(default_factory=WorldModelConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    project: ProjectConfig = field(default_factory=ProjectConfig)
    projector: ProjectorConfig = field(default_factory=ProjectorConfig)  # soft tokens for the evaluated agent
    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)  # omega, eta of the guided sampler
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)  # simulated rollouts, tail value
    ablation: AblationConfig = field(default_factory=AblationConfig)  # defaults = the full method
    credit: CreditConfig = field(default_factory=CreditConfig)
    evaluate_log: EvaluateLogConfig = field(
        default_factory=EvaluateLogConfig
    )  # `adwm evaluate-log`: one's own agents on one's own log
    ope: OPEConfig = field(default_factory=OPEConfig)  # the classic baselines (IS family, DM, DR, FQE)
    benchmark: BenchmarkConfig = field(default_factory=BenchmarkConfig)  # cells x seeds of `adwm benchmark`
    family: FamilyConfig = field(default_factory=FamilyConfig)
    ground_truth: GroundTruthConfig = field(default_factory=GroundTruthConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)

    def __post_init__(self) -> None:
        safe_name(self.experiment, "experiment")
        require(self.workers >= 0, "workers", self.workers, "0 (one per CPU core) or a number of processes >= 1")
        # `adwm project` trains the projectors `adwm evaluate` reads: both must read one world model
        require(
            self.evaluate.world_model == self.project.world_model,
            "evaluate.world_model",
            self.evaluate.world_model,
            f"the world model the projectors are trained on, project.world_model ({self.project.world_model})",
        )
        # a world whose agents read text, not latents, has no projector and no continuation from latents
        world = self.evaluate.world
        if not world_spec(world).reads_latents and world_spec(world).learned:
            require(
                self.ablation.reader == "logged",
                "ablation.reader",
                self.ablation.reader,
                f"logged with evaluate.world={world}, whose agents read the state's text (set "
                "evaluate.world=diffusion to read the decoder's text or the projector's soft tokens)",
            )
            require(
                self.guidance.eta == 0,
                "guidance.eta",
                self.guidance.eta,
                f"0 with evaluate.world={world}, which has no continuation guidance (set "
                "evaluate.world=diffusion for Theorem 1's continuation factor)",
            )
