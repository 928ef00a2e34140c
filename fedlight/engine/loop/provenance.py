"""Where a run's numbers came from: results.json's ``provenance``.

Each time a run starts or resumes (a *segment*), rank 0 records once the fedlight source that
runs (its version, git commit and whether the checkout has uncommitted changes: to a tracked
file, or a file the package holds that git does not track), the versions of torch, Lightning and
Python, the device and the number of processes, and the UTC times the segment started and last saved its progress. The segments travel in the
checkpoint, so a run resumed on other code or another machine shows each. ``summary`` is what
results.json holds: the latest segment's fields, the first segment's start, and every segment.

Git is asked with a short timeout and never fails a run: fedlight outside a git checkout (an
installed wheel), no git, or a slow git gives a null commit and says why in ``git_note``.
"""

from __future__ import annotations

import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning
import torch

from fedlight import __version__

PACKAGE = Path(__file__).resolve().parents[2]  # the fedlight package
GIT_TIMEOUT_S = 5.0
Segment = dict[str, Any]


def utc_now() -> str:
    """Now in UTC, ISO 8601 to the second with a ``Z`` (``2026-11-23T14:05:09Z``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _git(package_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(package_dir), *args], capture_output=True, text=True, check=True,
                          timeout=GIT_TIMEOUT_S).stdout.strip()


def git_source(package_dir: Path = PACKAGE) -> dict[str, Any]:
    """The git commit of the checkout ``package_dir`` is tracked in, and whether what runs differs from
    it: a tracked file changed, or a file in the package that git does not track (a new module the
    registry may import); untracked files elsewhere in the checkout (notes, outputs) do not count,
    nor do ignored ones (``__pycache__``).

    Returns:
        ``commit`` (a sha or None), ``dirty`` (a bool or None) and ``git_note`` (None, or why there
        is no commit: no git checkout, git missing or too slow).
    """
    try:  # a package git does not track is an installed copy, even inside another repo (a .venv)
        _git(package_dir, "ls-files", "--error-unmatch", "__init__.py")
        commit = _git(package_dir, "rev-parse", "HEAD")
        dirty = bool(_git(package_dir, "status", "--porcelain", "--untracked-files=no")
                     or _git(package_dir, "status", "--porcelain", "--untracked-files=all", "--", "."))
        return {"commit": commit, "dirty": dirty, "git_note": None}
    except FileNotFoundError:
        note = "git is not installed"
    except subprocess.TimeoutExpired:
        note = f"git took over {GIT_TIMEOUT_S:g} s"
    except subprocess.CalledProcessError:
        note = f"fedlight ran from '{package_dir}', which is not in a git checkout (an installed package)"
    return {"commit": None, "dirty": None, "git_note": note}


def device_text(device: torch.device) -> str:
    """A torch device as words: ``cpu``, ``cuda: NVIDIA H200``."""
    if device.type != "cuda":
        return device.type
    return f"cuda: {torch.cuda.get_device_name(device)}"


def new_segment(device: str, processes: int, package_dir: Path = PACKAGE) -> Segment:
    """The record of a run (or a resumption) starting now on ``device`` with ``processes`` ranks of
    ``threads`` torch threads each (torch's version names its build: ``2.14.1+cu130``)."""
    now = utc_now()
    return {"start": now, "end": now, "fedlight": __version__, **git_source(package_dir),
            "torch": str(torch.__version__), "lightning": lightning.__version__, "python": platform.python_version(),
            "device": device, "processes": processes, "threads": torch.get_num_threads()}


def ended_now(segments: list[Segment]) -> list[Segment]:
    """``segments`` with the last one ending now (a copy): what a save records."""
    return [*segments[:-1], {**segments[-1], "end": utc_now()}] if segments else []


def summary(segments: list[Segment]) -> dict[str, Any] | None:
    """results.json's ``provenance``: the latest segment, starting when the first did, with every
    segment (None before any: a rank other than 0)."""
    if not segments:
        return None
    return {**segments[-1], "start": segments[0]["start"], "segments": segments}
