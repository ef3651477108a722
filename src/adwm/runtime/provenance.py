"""What made a run: its resolved config, the command line and the commit, saved in the run's folder."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from omegaconf import OmegaConf

from adwm.runtime.atomic import atomic_write_text

CONFIG_FILE = "config.yaml"
# tables and figures the project's commands write into the checkout: changing them changes no result
GENERATED = ("docs/results", "benchmarks/results")
# git pathspecs for the whole checkout but `GENERATED`
OUTSIDE_GENERATED = (".", *(f":(exclude){g}" for g in GENERATED))


def source_root() -> Path:
    """The checkout the package runs from (a git checkout when `<root>/.git` exists)."""
    return Path(__file__).resolve().parents[3]


@lru_cache(maxsize=1)
def commit() -> str | None:
    """The git commit of the installed source (`-dirty` with uncommitted changes to tracked files other than
    the generated results, `GENERATED`, which a grid or benchmark rewrites as it goes), or None when the
    package is not run from a git checkout."""
    root = source_root()
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = is_dirty(root)
    except (OSError, subprocess.SubprocessError):
        return None
    if sha.returncode != 0:
        return None
    return sha.stdout.strip() + ("-dirty" if dirty else "")


def is_dirty(root: str | Path) -> bool:
    """Whether the git checkout at `root` has uncommitted changes to tracked files outside `GENERATED`."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", *OUTSIDE_GENERATED],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=10,
    )
    return bool(out.stdout.strip())


def changed_between(a: str, b: str, root: str | Path | None = None) -> list[str] | None:
    """The tracked files outside `GENERATED` that differ between commits `a` and `b` of the checkout at `root`
    (the package's by default); None when git cannot tell (no checkout, an unknown commit)."""
    root = Path(root) if root is not None else source_root()
    try:
        out = subprocess.run(
            ["git", "diff", "--name-only", a, b, "--", *OUTSIDE_GENERATED],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split() if out.returncode == 0 else None


def module_at(commit: str, path: str, root: str | Path | None = None) -> ModuleType:
    """The source file `path` of the checkout at `root` (the package's own by default) as `commit` wrote it,
    loaded as a module of its own (`<stem>_at_<commit>`): for benchmarks that time code against an older
    version of itself."""
    root = Path(root) if root is not None else source_root()
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=root, capture_output=True, text=True)
    if shown.returncode != 0:
        raise ValueError(f"{commit}:{path}: git show failed: {shown.stderr.strip()}")
    name = f"{Path(path).stem}_at_{commit}"
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def benchmark_stamp(argv: list[str] | None = None) -> dict:
    """What a benchmark script's result entry records of what made it: the command (the script's path in the
    checkout and its arguments, quoted for a shell) and the commit (`commit()`)."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    try:
        script = script.relative_to(source_root())
    except ValueError:
        pass
    return {"command": shlex.join(["python", str(script), *argv[1:]]), "commit": commit()}


def command_line(command: str, overrides: list[str]) -> str:
    """The `adwm` command line that reproduces a run, quoted for a shell."""
    return shlex.join(["adwm", command, *overrides])


def save_run_config(folder: str | Path, config_yaml: str, command: str, overrides: list[str]) -> Path:
    """`<folder>/config.yaml`: the resolved config, headed by the command line and the commit."""
    path = Path(folder) / CONFIG_FILE
    header = f"# {command_line(command, overrides)}\n# commit: {commit() or 'unknown (not a git checkout)'}\n"
    atomic_write_text(path, header + config_yaml)
    return path


def load_run_config(path: str | Path) -> dict:
    """A run's resolved config as saved by `save_run_config` (a summary's `config` names its file)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the run's config is missing (its command writes it when it ends)")
    return OmegaConf.to_container(OmegaConf.load(path))
