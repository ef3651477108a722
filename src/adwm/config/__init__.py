"""Configuration: the schema gathered from the stages, and its composition from files and overrides."""

from adwm.config.compose import ConfigError, config_dir, load_config, to_object
from adwm.config.schema import AblationConfig, AppConfig, BenchmarkConfig, CellConfig

__all__ = [
    "AblationConfig",
    "AppConfig",
    "BenchmarkConfig",
    "CellConfig",
    "ConfigError",
    "config_dir",
    "load_config",
    "to_object",
]
