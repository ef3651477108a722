"""`PolicyConfig`: an agent as data (its model, prompt, action-selection mode, temperature and eps)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.policies.prompt import DEFAULT_TEMPLATE
from adwm.runtime.checks import at_least, in_range, one_of
from adwm.runtime.devices import check_device

POLICY_KINDS = ("llm", "uniform", "heuristic")  # heuristic: a scripted player, for behaviour logs only
MODES = ("score", "generate")


@dataclass
class PolicyConfig:
    name: str = "agent"  # id written to episode logs and result tables; unique per run
    kind: str = "llm"  # llm | uniform | heuristic (policies/heuristic.py; temperature is its noise)
    model: str = ""  # Hugging Face name or local directory (save_pretrained)
    tokenizer: str | None = None  # defaults to `model`
    gguf_file: str | None = None  # file inside `model` for GGUF checkpoints (needs the gguf package)
    trust_remote_code: bool = False  # off: never run code shipped with a checkpoint unless asked
    mode: str = "score"  # score: rank admissible actions; generate: write free-form actions
    temperature: float = 1.0  # sampling temperature over action scores (0 = greedy)
    eps: float = 0.0  # epsilon-greedy mixing with a uniform admissible action
    history_turns: int = (
        0  # past (observation, action) turns in the prompt; 0: soft-token reading needs it, builtin states are Markov
    )
    prompt_template: str = DEFAULT_TEMPLATE  # fields: {task} {history} {observation}
    action_suffix: str = "\n"  # ends every action, so a prefix of a longer action is not favoured
    max_new_tokens: int = 24  # generate mode budget
    dtype: str = "float32"
    device: str = "cpu"  # cpu, cuda[:k], mps, or auto (a GPU when present)
    batch_states: int = 64  # states per forward pass; bounds memory

    def __post_init__(self) -> None:
        # a policy does not know where it sits in the config (`policy`, `collect.behaviour[0].policy`, ...):
        # its messages start with the field and name the policy; adwm.config prefixes the dotted path
        try:
            one_of(self.kind, "kind", POLICY_KINDS)
            one_of(self.mode, "mode", MODES)
            one_of(self.dtype, "dtype", ("float32", "float16", "bfloat16"))
            check_device(self.device, "device")
            at_least(self, "", 0, ("temperature", "history_turns"))
            in_range(self, "", ("eps",))
            at_least(self, "", 1, ("max_new_tokens", "batch_states"))
        except ValueError as err:
            raise ValueError(f"{err} (policy '{self.name}')") from None


def score_key(cfg: PolicyConfig) -> tuple:
    """What an agent's temperature-1 action scores depend on besides the state: its checkpoint and prompt.
    Policies of a family that differ only in temperature, eps or name share it."""
    return (
        cfg.kind,
        cfg.model,
        cfg.tokenizer,
        cfg.gguf_file,
        cfg.prompt_template,
        cfg.action_suffix,
        cfg.history_turns,
        cfg.dtype,
    )


@dataclass
class TinyModelConfig:
    vocab_size: int = 1024  # environment text is a small closed vocabulary; words become single tokens
    hidden_size: int = 192
    intermediate_size: int = 512
    num_layers: int = 4  # ~2M parameters: a few ms per forward pass on 2 CPU cores
    num_heads: int = 4
    max_positions: int = 512  # longest prompt plus action, with room to spare
