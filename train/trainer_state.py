"""The CPU training loops' checkpoints: a peft adapter folder plus the optimizer state and step
(trainer_state.pt, written last so a folder holding it is complete), saved and read back to resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lorarag.core.errors import ConfigError

STATE_FILE = "trainer_state.pt"


def load_trainer_state(folder: Path, device: str = "cpu") -> dict[str, Any]:
    """A checkpoint's optimizer state and step, read with `weights_only=True`: tensors and plain
    containers only, so a run folder someone hands you cannot run code when it is resumed (a
    pickled object is refused: ConfigError naming the file)."""
    import pickle

    import torch

    path = folder / STATE_FILE
    try:
        state = torch.load(path, weights_only=True, map_location=device)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        lines = [x.strip() for x in str(exc).splitlines() if x.strip()] or [type(exc).__name__]
        why = next((x for x in lines if "GLOBAL" in x), lines[0])[:120]
        raise ConfigError(
            f"{path}: not a plain optimizer state, refused ({why}); "
            "delete this checkpoint folder to resume from an earlier one"
        ) from None
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("optimizer"), dict) or type(step) is not int:
        raise ConfigError(f"{path}: expected {{'optimizer': state dict, 'step': int}}")
    return state


def save_checkpoint(model, opt, folder: Path, step: int) -> None:
    """Adapter in ms-swift/peft format, plus optimizer state for resuming (written last)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tmp = folder / (STATE_FILE + ".tmp")
    torch.save({"optimizer": opt.state_dict(), "step": step}, tmp)  # tensors and plain values only
    tmp.replace(folder / STATE_FILE)


def last_saved(out: Path) -> Path | None:
    """The newest checkpoint folder under `out` whose optimizer state was written (its last file)."""
    cks = sorted(
        (p for p in out.glob("checkpoint-*") if (p / STATE_FILE).is_file()), key=lambda p: int(p.name.split("-")[1])
    )
    return cks[-1] if cks else None
