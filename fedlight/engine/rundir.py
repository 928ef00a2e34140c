"""The run folder: resolved recipe, TensorBoard events, results.json, ledger, checkpoints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from fedlight.engine.checkpoint import atomic_write_bytes
from fedlight.errors import UserError

CHECKPOINT = "checkpoints/last.pt"


def prepare_run_dir(path: Path, resume: bool, overwrite: bool) -> None:
    """Make ``path`` ready: refuse to clobber a used folder, check it is writable."""
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other; pass only one")
    used = path.is_dir() and any(path.iterdir())
    if resume:
        if not (path / CHECKPOINT).is_file():
            raise UserError(f"run folder '{path}' has no checkpoint to resume ({CHECKPOINT}); drop --resume")
    elif used and not overwrite:
        raise UserError(f"run folder '{path}' is not empty; pass --resume to continue it, "
                        "--overwrite to replace it, or set run.dir elsewhere")
    elif used:
        shutil.rmtree(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as exc:
        raise UserError(f"run folder '{path}' is not writable ({exc.strerror}); set run.dir to a writable folder") from None


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def write_yaml(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, yaml.safe_dump(obj, sort_keys=False).encode())
