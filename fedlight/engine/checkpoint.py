"""Atomic, verifiable checkpoints that cannot run code when loaded.

A checkpoint is written to a temporary file in the same folder, flushed and fsync'ed,
then renamed over the old one, so a kill at any moment leaves either the old or the new
file. It is read back with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch

from fedlight.errors import UserError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(path: Path, obj: dict[str, Any]) -> None:
    """Serialise ``obj`` (tensors, dicts, lists, numbers, strings) to ``path`` atomically."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint; a missing, truncated or foreign file raises a one-line UserError."""
    if not path.is_file():
        raise UserError(f"checkpoint '{path}' not found; start without --resume")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncation and corruption surface as many exception types
        raise UserError(f"checkpoint '{path}' is corrupt or truncated ({type(exc).__name__}); "
                        "delete it and rerun with --overwrite") from None
