"""Shared fixtures: a seconds-scale config and a tiny randomly initialised causal LM."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # tests never touch W&B
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from adwm.config import load_config  # noqa: E402
from adwm.encoders.tokenizer import train_tokenizer  # noqa: E402
from adwm.policies.config import TinyModelConfig
from adwm.policies.tiny import make_tiny_llama  # noqa: E402
from helpers import builtin_texts  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory) -> str:
    """A random-init 1-layer Llama with a BPE tokenizer trained on builtin text, saved with save_pretrained."""
    path = tmp_path_factory.mktemp("tiny_lm")
    torch.manual_seed(0)
    tok = train_tokenizer(builtin_texts(), 400)
    model = make_tiny_llama(TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2), tok)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def bc_agent_dir(tmp_path_factory) -> str:
    """A tiny agent trained for seconds by behaviour cloning: its action choice depends on what it reads."""
    from adwm.envs import EnvConfig
    from adwm.policies.config import PolicyConfig
    from adwm.runtime.config import LoggerConfig, TrainerConfig
    from adwm.stages.config import AgentConfig, AgentVariant
    from adwm.stages.train_agent import train_agent

    agent = AgentConfig(
        dir=str(tmp_path_factory.mktemp("bc")),
        model=TinyModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2),
        variants={"tiny": AgentVariant(episodes=40, steps=120)},
    )
    path = train_agent(
        agent,
        "tiny",
        EnvConfig(),
        PolicyConfig(history_turns=0),
        TrainerConfig(enable_progress_bar=False),
        LoggerConfig(),
        0,
        {},
    )
    return str(path)


@pytest.fixture
def smoke_overrides(tmp_path) -> list[str]:
    """Overrides that shrink any command to seconds and keep its outputs in a temporary folder."""
    return ["experiment=smoke", f"run.root={tmp_path}"]


@pytest.fixture
def smoke_cfg(smoke_overrides):
    return load_config(smoke_overrides, "quickstart")


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """One uninterrupted smoke quickstart, made once per session: agents, a log, ground truth, a world
    model, estimates and baselines, plus `adwm project`'s projector of the default policy (the quickstart's
    agents read the snapped state's text and train none). Read by the crash and bad-input suites, never
    written, except that an evaluation with other settings adds its behaviour simulations to the store
    beside the world model (evaluate.behaviour_out)."""
    from adwm.cli import main
    from helpers import reads

    root = tmp_path_factory.mktemp("smoke_run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a worker process; tests that compare with it run on one thread too
    try:
        assert main(["quickstart", "experiment=smoke", f"run.root={root}"]) == 0
        assert main(["project", *reads(root)]) == 0
    finally:
        torch.set_num_threads(threads)
    return root


@pytest.fixture
def one_thread():
    """torch on one thread in this process, as in a worker process (and the smoke run); restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
