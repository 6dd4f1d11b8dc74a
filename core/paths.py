"""The configs that ship with the package (package data `lorarag.configs`), found the same way from
a checkout's editable install and from a wheel in site-packages."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

from lorarag.core.errors import ConfigError


def packaged_config(rel: str) -> Path:
    """The path of a shipped config such as "run/ci-tiny.yaml"; ConfigError when it is not shipped."""
    res = files("lorarag.configs").joinpath(rel)
    if not res.is_file():
        raise ConfigError(f"{rel}: not among the configs shipped with lorarag")
    with as_file(res) as path:  # a real file on disk for an installed wheel or an editable checkout
        return Path(path)


def check_name(name: str, what: str = "name") -> str:
    """`name` when it is one plain path component (a run's or a system's folder name); ValueError
    naming `what` otherwise: empty, `.` or `..`, or holding a path separator or NUL, since such a
    name would put the folder elsewhere (`..` climbs out, `.` is the parent folder itself)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{what} must not be empty: it names a folder")
    bad = next((c for c in ("/", "\\", "\0") if c in name), None)
    if bad is not None:
        raise ValueError(f"{what} {name!r}: holds {'NUL' if bad == chr(0) else repr(bad)}; it names one folder, not a path")
    if name.strip() in (".", "..") or name != name.strip():
        raise ValueError(f"{what} {name!r}: not a folder name (no '.', '..', or spaces around it)")
    return name


def child(folder: str | Path, name: str, what: str = "name") -> Path:
    """`folder/name` after `check_name`, refused (ConfigError) unless it resolves inside `folder`
    (a symlink there pointing out of it is refused): where every run, eval and system folder is made."""
    try:
        check_name(name, what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    path = Path(folder) / name
    inside(path, folder)
    return path


def inside(path: str | Path, folder: str | Path) -> Path:
    """`path`, refused (ConfigError) unless it resolves to somewhere strictly inside `folder`."""
    root, real = Path(folder).resolve(), Path(path).resolve()
    if real == root or root not in real.parents:
        raise ConfigError(f"{path}: resolves to {real}, outside {folder}; refusing to write there")
    return Path(path)
