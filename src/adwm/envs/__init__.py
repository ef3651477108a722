"""Text environments behind one interface."""

from adwm.envs.base import Reset, Step, TextEnv
from adwm.envs.builtin import BuiltinEnv, BuiltinEnvConfig
from adwm.envs.registry import ENVS, EnvConfig, make_env

__all__ = ["ENVS", "BuiltinEnv", "BuiltinEnvConfig", "EnvConfig", "Reset", "Step", "TextEnv", "make_env"]
