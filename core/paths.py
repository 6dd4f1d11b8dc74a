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
