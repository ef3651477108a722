"""`PolicyConfig`: an agent as data (its model, prompt, action-selection mode, temperature and eps)."""

from __future__ import annotations

from dataclasses import dataclass

from adwm.policies.prompt import DEFAULT_TEMPLATE

POLICY_KINDS = ("llm", "uniform")
MODES = ("score", "generate")


@dataclass
class PolicyConfig:
    name: str = "agent"  # id written to episode logs and result tables; unique per run
    kind: str = "llm"  # llm | uniform
    model: str = ""  # Hugging Face name or local directory (save_pretrained)
    tokenizer: str | None = None  # defaults to `model`
    gguf_file: str | None = None  # file inside `model` for GGUF checkpoints (needs the gguf package)
    trust_remote_code: bool = False  # off: never run code shipped with a checkpoint unless asked
    mode: str = "score"  # score: rank admissible actions; generate: write free-form actions
    temperature: float = 1.0  # sampling temperature over action scores (0 = greedy)
    eps: float = 0.0  # epsilon-greedy mixing with a uniform admissible action
    history_turns: int = 1  # past (observation, action) turns in the prompt; builtin states are Markov
    prompt_template: str = DEFAULT_TEMPLATE  # fields: {task} {history} {observation}
    action_suffix: str = "\n"  # ends every action, so a prefix of a longer action is not favoured
    max_new_tokens: int = 24  # generate mode budget
    dtype: str = "float32"
    device: str = "cpu"
    batch_states: int = 64  # states per forward pass; bounds memory

    def __post_init__(self) -> None:
        where = f"policy '{self.name}'"
        if self.kind not in POLICY_KINDS:
            raise ValueError(f"{where}: kind: unknown kind '{self.kind}'; choose from {list(POLICY_KINDS)}")
        if self.mode not in MODES:
            raise ValueError(f"{where}: mode: unknown mode '{self.mode}'; choose from {sorted(MODES)}")
        if self.temperature < 0:
            raise ValueError(f"{where}: temperature: expected >= 0, got {self.temperature}")
        if not 0.0 <= self.eps <= 1.0:
            raise ValueError(f"{where}: eps: expected a value in [0, 1], got {self.eps}")
        if self.history_turns < 0 or self.max_new_tokens < 1 or self.batch_states < 1:
            raise ValueError(f"{where}: history_turns >= 0, max_new_tokens >= 1 and batch_states >= 1 expected")
