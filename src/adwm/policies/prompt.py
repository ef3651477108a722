"""Prompt rendering: task, the last k turns of history, the current observation."""

from __future__ import annotations

from adwm.policies.base import AgentState

DEFAULT_TEMPLATE = "Task: {task}\n{history}{observation}\n> "
TURN_TEMPLATE = "{observation}\n> {action}\n"


def render_prompt(template: str, state: AgentState, history_turns: int) -> str:
    """Fill `template`'s {task}, {history} and {observation} fields."""
    turns = state.history[-history_turns:] if history_turns > 0 else []
    history = "".join(TURN_TEMPLATE.format(observation=o, action=a) for o, a in turns)
    try:
        return template.format(task=state.task, history=history, observation=state.observation)
    except (KeyError, IndexError) as err:
        raise ValueError(
            f"policy.prompt_template: unknown field {err}; allowed fields are {{task}}, {{history}}, {{observation}}"
        ) from err
