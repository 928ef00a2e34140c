"""The installed packages' entry points, read one package at a time, so that one package's malformed
``entry_points.txt`` (a line without ``=``, bytes that are not UTF-8) is skipped with one warning naming
it instead of ending every listing in a traceback.

``importlib.metadata.entry_points`` parses every package's file in one go and raises on the first bad
one; torch calls it as it is imported (its ``torch.backends`` group), so such a package stops any
command that trains: :func:`check_torch_can_load` names it in one line first.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from fedlight.errors import UserError

_warned: set[str] = set()  # the packages already named on stderr by this process


def _package(dist: importlib.metadata.Distribution) -> str:
    """The package's name, or its metadata folder's where even the name cannot be read."""
    try:
        name = dist.metadata["Name"]
    except Exception:  # a package's damaged METADATA is as foreign as its entry points
        name = None
    return name or Path(str(getattr(dist, "_path", "?"))).name


def _read(dist: importlib.metadata.Distribution) -> list[importlib.metadata.EntryPoint] | str:
    """``dist``'s entry points, or what is wrong with its ``entry_points.txt``."""
    try:
        return list(dist.entry_points)
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
    except Exception as exc:  # TypeError / ValueError (a line without '='), OSError
        lines = (dist.read_text("entry_points.txt") or "").splitlines()
        bad = [(n, line) for n, line in enumerate(lines, 1)
               if line.strip() and not line.lstrip().startswith(("#", ";", "[")) and "=" not in line]
        return f"line {bad[0][0]} {bad[0][1].strip()!r} has no '='" if bad else f"{type(exc).__name__}: {exc}"


def _problem_text(dist: importlib.metadata.Distribution, problem: str) -> str:
    where = getattr(dist, "_path", None)
    file = f" ({Path(str(where)) / 'entry_points.txt'})" if where else ""
    return f"package '{_package(dist)}' has a malformed entry_points.txt{file}: {problem}"


def in_group(group: str) -> list[importlib.metadata.EntryPoint]:
    """The entry points of ``group`` of every installed package (the first of a name on ``sys.path``, as
    ``importlib.metadata`` takes it); a package whose entry points cannot be read is skipped, with one
    warning line naming it the first time."""
    found, seen = [], set()
    for dist in importlib.metadata.distributions():
        # importlib.metadata's own key (from the folder's name: reading each METADATA costs 40 ms)
        name = getattr(dist, "_normalized_name", None) or _package(dist).lower().replace("-", "_")
        if name in seen:
            continue
        seen.add(name)
        read = _read(dist)
        if isinstance(read, str):
            _warn(dist, read)
            continue
        found += [ep for ep in read if ep.group == group]
    return found


def _warn(dist: importlib.metadata.Distribution, problem: str) -> None:
    package = _package(dist)
    if package in _warned:
        return
    _warned.add(package)
    from fedlight.engine.run.launch import is_child  # torch-free; the ranks it started leave messages to rank 0

    if not is_child():
        print(f"fedlight: warning: {_problem_text(dist, problem)}; its plug-ins are skipped: fix or uninstall it",
              file=sys.stderr)


def check_torch_can_load() -> None:
    """Raise a one-line ``UserError`` naming the package whose entry points stop ``import torch``, if any.

    Raises:
        UserError: ``importlib.metadata.entry_points`` (which torch calls) fails on an installed package.
    """
    try:
        importlib.metadata.entry_points(group="torch.backends")
    except Exception:  # noqa: BLE001 (why: whatever stops it stops torch; the package is named below)
        bad = [(dist, read) for dist in importlib.metadata.distributions() if isinstance(read := _read(dist), str)]
        if bad:
            dist, problem = bad[0]
            raise UserError(f"{_problem_text(dist, problem)}, which stops 'import torch'; fix or uninstall "
                            f"'{_package(dist)}'") from None
        raise
