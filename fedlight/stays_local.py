"""Nothing leaves the machine and nothing lands in ``$HOME``: the optional dependencies' telemetry is
off, and their caches, configuration and logs go to fedlight's cache folder.

``import fedlight`` calls :func:`keep_local`, so every command, sweep task and local rank (they inherit
the environment) and every in-process ``fit`` gets it. Each variable is set only where the environment
leaves it unset: a value the user gives wins.

=================================  =======================================================================
variable                           why
=================================  =======================================================================
``MLFLOW_DISABLE_TELEMETRY=true``  MLflow 3 sends usage events and writes an installation id to
                                   ``~/.config/mlflow/telemetry.json``
``WANDB_ERROR_REPORTING=false``    W&B reports its own errors to Sentry, offline runs too
``DO_NOT_TRACK=1``                 the common opt-out (consoledonottrack.com) for the rest
``MPLCONFIGDIR``                   matplotlib's font list (``~/.cache/matplotlib``) and config folder
``WANDB_CACHE_DIR``,               W&B's cache, settings, staging area, artifacts and its service's
``WANDB_CONFIG_DIR``,              ``core-debug-*.log`` (``~/.cache/wandb``, ``~/.config/wandb``,
``WANDB_DATA_DIR``,                ``~/.local/share/wandb``)
``WANDB_ARTIFACT_DIR``
=================================  =======================================================================

The cache folder is ``FEDLIGHT_CACHE_DIR`` where it is set (keep one to skip matplotlib's 0.25 s font
scan at each start); otherwise a ``fedlight-cache-*`` folder in the system's temporary folder, made only
when a tool writes to it and removed when the process that chose it ends (:func:`clean_up`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

CACHE_VARIABLE = "FEDLIGHT_CACHE_DIR"
TELEMETRY_OFF = {"MLFLOW_DISABLE_TELEMETRY": "true", "WANDB_ERROR_REPORTING": "false", "DO_NOT_TRACK": "1"}
CACHES = {"MPLCONFIGDIR": "matplotlib", "WANDB_CACHE_DIR": "wandb/cache", "WANDB_CONFIG_DIR": "wandb/config",
          "WANDB_DATA_DIR": "wandb/data", "WANDB_ARTIFACT_DIR": "wandb/artifacts"}

_chosen: list[tuple[int, Path]] = []  # (the process that chose it, the temporary cache folder), if one was chosen


def keep_local() -> None:
    """Turn the optional dependencies' telemetry off and point their caches at :func:`cache_folder`,
    where the environment does not already say."""
    for name, value in TELEMETRY_OFF.items():
        os.environ.setdefault(name, value)
    if all(name in os.environ for name in CACHES):
        return
    folder = cache_folder()
    for name, sub in CACHES.items():
        os.environ.setdefault(name, str(folder / sub))


def cache_folder() -> Path:
    """``FEDLIGHT_CACHE_DIR``, or this process's temporary cache folder (named, not made)."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    if not _chosen:
        _chosen.append((os.getpid(), Path(tempfile.gettempdir()) / f"fedlight-cache-{os.getpid()}-{os.urandom(4).hex()}"))
        atexit.register(clean_up)
    return _chosen[0][1]


def clean_up() -> None:
    """Remove the temporary cache folder this process chose; a no-op under ``FEDLIGHT_CACHE_DIR`` and in a
    forked child, whose parent still uses it. The command line calls it before its quick exit, which
    skips ``atexit``."""
    for pid, folder in _chosen:
        if pid == os.getpid():
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def temporary_files_in_cache() -> Iterator[None]:
    """Inside: Python's temporary files and folders go to the cache folder. W&B makes two temporary
    folders as it loads (``*wandb-media``, ``*wandb-artifacts``) that the command line's quick exit
    would leave in ``/tmp``."""
    folder = cache_folder() / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    before, tempfile.tempdir = tempfile.tempdir, str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = before
