"""Where a repository keeps its importable code: what `pip install -e .` would put on the path.

    package_dirs({"pyproject.toml": b"...", "src/pkg/__init__.py": b""})   # ("src",)
    env = with_layout(env, repo_files)          # python_path filled in when it was left open

SWE-bench's specs install every Python repository (`pip install -e .`) before its tests run,
so a src-layout package imports from the checkout. The sandboxes are offline and an editable
install needs the project's build backend (setuptools, hatchling, flit, poetry, ...), so
arborl puts the same directories on `PYTHONPATH` instead: for pure-Python code the tests then
import the checkout's files, as an editable install makes them do. (What a path cannot give:
the package's metadata, `importlib.metadata.version("pkg")`; an environment that needs it
installs the package in `instance_install`.)

Read, in this order (each adds directories; the repository root itself is never listed: the
test command runs there): `pyproject.toml` (`[tool.setuptools] package-dir` `""` entry,
`[tool.setuptools.packages.find] where`, hatch's wheel `packages` / `sources`, poetry's
`packages` `from`, pdm's `package-dir`, maturin's `python-source`), `setup.cfg` (`[options]
package_dir`, `[options.packages.find] where`), `setup.py` (`package_dir={"": ...}`,
`find_packages("...")` / `find_packages(where="...")`); if none names one, a `src/` directory
holding Python code (flit, and projects with no build configuration).
"""

from __future__ import annotations

import configparser
import re
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from .instance import SWEEnvironment
from .repos import RepoFiles

_SETUP_PY_DIR = re.compile(r"""package_dir\s*=\s*\{\s*(['"])\1\s*:\s*['"]([^'"]+)['"]""")
_SETUP_PY_FIND = re.compile(r"""find(?:_namespace)?_packages\(\s*(?:where\s*=\s*)?['"]([^'"]+)['"]""")


def _text(files: Mapping[str, bytes | str], path: str) -> str | None:
    data = files.get(path)
    if data is None:
        return None
    return data if isinstance(data, str) else data.decode("utf-8", errors="replace")


def _table(data: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)  # type: ignore[assignment]
    return data


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def _pyproject_dirs(text: str) -> list[str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    out: list[str] = []
    package_dir = _table(data, "tool", "setuptools", "package-dir")
    if isinstance(package_dir, dict) and isinstance(package_dir.get(""), str):
        out.append(package_dir[""])
    out += _strings(_table(data, "tool", "setuptools", "packages", "find", "where"))
    wheel = _table(data, "tool", "hatch", "build", "targets", "wheel") or {}
    out += [p.rsplit("/", 1)[0] for p in _strings(_table(wheel, "packages")) if "/" in p.strip("/")]
    sources = _table(wheel, "sources")
    out += _strings(list(sources) if isinstance(sources, dict) else sources)
    for entry in _table(data, "tool", "poetry", "packages") or []:
        if isinstance(entry, dict):
            out += _strings(entry.get("from"))
    out += _strings(_table(data, "tool", "pdm", "build", "package-dir"))
    out += _strings(_table(data, "tool", "maturin", "python-source"))
    return out


def _setup_cfg_dirs(text: str) -> list[str]:
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(text)
    except configparser.Error:
        return []
    out = []
    for line in cfg.get("options", "package_dir", fallback="").splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.strip() and value.strip():
            out.append(value.strip())
    out += cfg.get("options.packages.find", "where", fallback="").split()
    return out


def _setup_py_dirs(text: str) -> list[str]:
    return [m.group(2) for m in _SETUP_PY_DIR.finditer(text)] + _SETUP_PY_FIND.findall(text)


def _clean(dirs: Iterable[str], files: Mapping[str, bytes | str]) -> tuple[str, ...]:
    out: list[str] = []
    for d in dirs:
        d = d.strip().strip("/")
        d = d[2:] if d.startswith("./") else d
        if not d or d == "." or d.startswith("/") or ".." in d.split("/") or d in out:
            continue
        if any(p.startswith(d + "/") for p in files):  # a directory the repository has
            out.append(d)
    return tuple(out)


def package_dirs(repo_files: Mapping[str, bytes | str] | RepoFiles) -> tuple[str, ...]:
    """The repository's directories that an install puts on `sys.path` (see the module doc);
    () for a flat layout (the package at the root)."""
    files = repo_files.files if isinstance(repo_files, RepoFiles) else repo_files
    dirs: list[str] = []
    for name, read in (
        ("pyproject.toml", _pyproject_dirs),
        ("setup.cfg", _setup_cfg_dirs),
        ("setup.py", _setup_py_dirs),
    ):
        text = _text(files, name)
        if text is not None:
            dirs += read(text)
    found = _clean(dirs, files)
    if found:
        return found
    src_code = any(p.startswith("src/") and p.endswith(".py") for p in files)
    return ("src",) if src_code and "src/__init__.py" not in files else ()


def with_layout(
    environment: SWEEnvironment, repo_files: Mapping[str, bytes | str] | RepoFiles
) -> SWEEnvironment:
    """`environment` with `python_path` found from the repository's files, unless it was set."""
    if environment.python_path is not None:
        return environment
    return environment.model_copy(update={"python_path": package_dirs(repo_files)})
