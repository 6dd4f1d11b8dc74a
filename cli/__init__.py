"""The `lorarag` console script: one typer app; each package registers its own subcommands, and
`cli/bench.py` every `lorarag bench` command (its `BENCHMARKS` registry).

Sub-command modules (`cli/rag.py`, `generate.py`, `train.py`, `eval.py`, `study.py`,
`serve.py`, `bench.py`) must import only light modules at top level so `lorarag --help` stays fast.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys
from pathlib import Path

import typer

from lorarag.core.config import load_config
from lorarag.core.errors import ConfigError, UserError
from lorarag.core.lock import release_all
from lorarag.core.overrides import HELP as OVERRIDES_HELP
from lorarag.core.overrides import parse_sets

# Installed as lorarag.cli (pyproject's package-dir): a bare `import cli` from the checkout root
# would load a second copy of every module, with its own registries and records.
if __name__ != "lorarag.cli":
    raise ImportError(f"import lorarag.cli, not {__name__}: the folder cli/ is installed as lorarag.cli")

# Offline by design: no hub downloads, here or in CI. The vLLM defaults are the Makefile's, so
# `.venv/bin/lorarag bench rag` works outside make too: no vLLM plugins (the torchvision one
# fails beside the CPU torch), the engine in-process, 1 GiB of CPU KV cache. Set any of them in
# the environment to override.
ENV_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "MODELSCOPE_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_PLUGINS": "",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}
for _key, _value in ENV_DEFAULTS.items():
    os.environ.setdefault(_key, _value)

app = typer.Typer(
    name="lorarag",
    help="RAG with a LoRA-fine-tuned fallback: index, ask, train, evaluate, compare.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"lorarag {version('lorarag')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print lorarag's version and exit"
    ),
) -> None:
    """RAG with a LoRA-fine-tuned fallback: index, ask, train, evaluate, compare."""


# Which schema validates which folder of configs/ ("module:Class", imported lazily).
CONFIG_SCHEMAS: dict[str, str] = {
    "rag": "lorarag.rag.config:RAGConfig",
    "train": "lorarag.train.config:TrainConfig",
    "eval": "lorarag.eval.config:EvalConfig",
    "run": "lorarag.trained.config:RunConfig",
    "check": "lorarag.rag.generators.agreement:BackendsCheckConfig",
}

_SUBCOMMAND_MODULES = (
    "lorarag.cli.rag",
    "lorarag.cli.generate",
    "lorarag.cli.train",
    "lorarag.cli.eval",
    "lorarag.cli.study",
    "lorarag.cli.serve",
    "lorarag.cli.bench",
)


def _schema(name: str) -> type:
    module, cls = CONFIG_SCHEMAS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def schema_for(path: Path) -> type:
    """The config model for a YAML file, chosen by its folder under configs/ (rag, train, eval,
    run, check); a file anywhere else (a user's `my-kb.yaml`) is read as a run config."""
    folder = path.parent.name
    return _schema(folder if folder in CONFIG_SCHEMAS else "run")


def explain_key(key: str) -> str:
    """What a dotted config key means (core/explain.py), read as a run config writes it
    (`eval.max_per_cell`, `train.swift`, `rag.retrieval.top_k`), or with the config kind first
    (the configs/ folder: `run.`, `check.`; `eval.` and `train.` also find the keys of their own
    configs/eval and configs/train files)."""
    from lorarag.core.explain import explain

    key = key.strip()
    kind, _, rest = key.partition(".")
    run_model = _schema("run")
    if kind == "run":
        return explain(run_model, rest, kind)
    if kind in run_model.model_fields:
        try:
            return explain(run_model, key)
        except ConfigError:
            if kind not in CONFIG_SCHEMAS:
                raise
        return explain(_schema(kind), rest, kind)
    if kind not in CONFIG_SCHEMAS:
        raise ConfigError(
            f"{key}: unknown config kind '{kind}' (known: {', '.join(sorted(CONFIG_SCHEMAS))}; "
            f"or a run config's key: {', '.join(run_model.model_fields)})"
        )
    return explain(_schema(kind), rest, kind)


@app.command()
def validate(
    paths: list[Path] = typer.Argument(None, help="YAML files or folders (default: configs/)"),
    explain: str | None = typer.Option(
        None,
        "--explain",
        metavar="KEY",
        help="print what a config key means instead (type, default, "
        "description), e.g. rag.retrieval.top_k; a section lists "
        "its keys",
    ),
    sets: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help=OVERRIDES_HELP),
) -> None:
    """Validate every YAML config (unknown keys are errors), or explain one key."""
    if explain is not None:
        typer.echo(explain_key(explain))
        return
    overrides = parse_sets(sets)
    targets = paths or [Path("configs")]
    files: list[Path] = []
    for t in targets:
        files.extend(sorted(t.rglob("*.yaml")) if t.is_dir() else [t])
    if not files:
        raise ConfigError("no YAML files found under " + ", ".join(map(str, targets)))
    bad = 0
    for f in files:
        try:
            load_config(f, schema_for(f), overrides)
            typer.echo(f"ok    {f}")
        except ConfigError as exc:
            bad += 1
            typer.echo(f"error {exc}")
    typer.echo(f"{len(files) - bad} valid, {bad} invalid")
    if bad:
        raise typer.Exit(1)


for _mod in _SUBCOMMAND_MODULES:
    try:
        _m = importlib.import_module(_mod)
    except ModuleNotFoundError as exc:
        if exc.name != _mod:  # a real missing dependency inside the module: fail loudly
            raise
        continue
    _m.register(app)


# What the user's machine can refuse a command (a folder without write permission, a read-only or
# full disk, a path through a file, a missing file): one line naming the path, exit 2, like a
# UserError. Any other OSError is a bug and keeps its traceback.
USER_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
        errno.ELOOP,
    }
)
USER_OS_ERRORS = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError)
INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C (128 + SIGINT)


def os_error_line(exc: OSError) -> str:
    """`path: reason` of an OSError (`path -> other` for a rename), e.g. `out/report.html: Permission denied`."""
    where = " -> ".join(os.fsdecode(f) for f in (exc.filename, exc.filename2) if f is not None)
    what = exc.strerror or str(exc) or type(exc).__name__
    return f"{where}: {what}" if where else what


def main() -> None:
    """Entry point: run the app, turning user errors (and what the machine refuses, see
    `USER_ERRNOS`) into one-line messages and exit 2; Ctrl-C anywhere is one line `interrupted`, exit 130."""
    logging.basicConfig(level=os.environ.get("LORARAG_LOG", "INFO"), format="%(levelname)s %(name)s: %(message)s")

    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        if exc.errno not in USER_ERRNOS and not isinstance(exc, USER_OS_ERRORS):
            raise
        typer.echo(f"error: {os_error_line(exc)}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:  # outside a command (typer turns one inside into exit 130)
        typer.echo("interrupted", err=True)
        sys.exit(INTERRUPTED)
    except SystemExit as exc:
        if exc.code == INTERRUPTED:  # typer's Ctrl-C: it says nothing
            typer.echo("interrupted", err=True)
        raise
    finally:
        release_all()  # the run and eval folders the command held (core/lock.py), its lock files removed


if __name__ == "__main__":
    main()
