"""The run folder's files: their names (the checkpoint, the recipe copy) and how one is written
(atomically: a reader sees the old file or the new one, never half of either).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedlight.atomic_files import atomic_write_bytes
from fedlight.config.files import dump_yaml

CHECKPOINT = "checkpoints/last.pt"
RECIPE = "recipe.yaml"
RESULTS = "results.json"


def write_yaml(path: Path, obj: Any) -> None:
    text = dump_yaml(obj)  # first: an object YAML cannot hold raises before any file is touched
    atomic_write_bytes(path, text.encode())
