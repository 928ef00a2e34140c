"""The partition pictures of a report: for each group, its first finished run's clients (size, label
histogram, domain), drawn from the run folder's ``partition.json`` (``fedlight.data.partition_picture``).
A seed draws its own partition; the first seed's stands for the group."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib.pyplot as plt

from fedlight.atomic_files import atomic_write_bytes
from fedlight.data.partition_picture import partition_picture, read_summary
from fedlight.report.arm_groups import Group, group_label


def partition_file(index: int) -> str:
    return f"partition_{index + 1}.png"


def drawable(groups: list[Group]) -> list[tuple[int, Group]]:
    """The groups (with their index) whose first run by seed has a ``partition.json``."""
    return [(i, g) for i, g in enumerate(groups) if read_summary(min(g[1], key=lambda r: r.seed).path) is not None]


def partition_files(groups: list[Group]) -> list[str]:
    """The names ``write_partition_pictures`` writes."""
    return [partition_file(i) for i, _ in drawable(groups)]


def write_partition_pictures(groups: list[Group], keys: list[str], out: Path, remake: str) -> list[str]:
    """One PNG a group into ``out``; returns the file names (``remake``: what a failed write asks of the user)."""
    files = []
    for i, (values, runs) in drawable(groups):
        first = min(runs, key=lambda r: r.seed)
        fig = partition_picture(read_summary(first.path), f"{group_label(keys, values)}, seed {first.seed}")
        picture = io.BytesIO()
        fig.savefig(picture, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        atomic_write_bytes(out / partition_file(i), picture.getvalue(), then=remake)
        files.append(partition_file(i))
    return files
