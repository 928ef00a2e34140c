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


def prepare_run_dir(path: Path, resume: bool, overwrite: bool, min_free_mb: int = 0) -> None:
    """Make ``path`` ready: refuse to clobber a used folder, check it is writable and its disk has room."""
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other; pass only one")
    used = path.is_dir() and any(path.iterdir())
    if resume:
        if not (path / CHECKPOINT).is_file() and not (path / (CHECKPOINT + ".prev")).is_file():
            raise UserError(f"run folder '{path}' has no checkpoint to resume ({CHECKPOINT}); drop --resume")
    elif used and not overwrite:
        raise UserError(f"run folder '{path}' is not empty; pass --resume to continue it, "
                        "--overwrite to replace it, or set run.dir elsewhere")
    elif used:
        shutil.rmtree(path)
    check_free_space(path, min_free_mb)
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as exc:
        if created:  # leave nothing behind
            shutil.rmtree(path, ignore_errors=True)
        raise UserError(f"run folder '{path}' is not writable ({exc.strerror}); set run.dir to a writable folder") from None


def check_free_space(path: Path, min_free_mb: int) -> None:
    """Raise a one-line UserError if the disk that will hold ``path`` has less than ``min_free_mb`` MiB free."""
    anchor = path.absolute()
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    try:
        free = shutil.disk_usage(anchor).free
    except OSError:
        return  # cannot tell: the write probe decides
    if free < min_free_mb * 2**20:
        raise UserError(f"run folder '{path}': its disk has {free / 2**20:.0f} MiB free, less than "
                        f"run.min_free_mb={min_free_mb}; free space or set run.dir to another disk")


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2) + "\n").encode())


def write_yaml(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, yaml.safe_dump(obj, sort_keys=False).encode())
