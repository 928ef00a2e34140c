"""The run folder: one run at a time, nothing replaced before the new run has saved, and its files.

Rank 0 of a run holds an exclusive ``flock`` on ``.fedlight.lock`` in the folder for the life of
the run; the kernel releases it when the process ends, however it ends. A second ``fedlight fit``
into a held folder is refused in one line naming the PID that holds it.

Replacing a run (``--overwrite``, or ``--resume`` of a run that saved no round) moves the old
one into ``.fedlight-replaced/`` inside the folder, and deletes it once the new run has finished
(its ``results.json`` holds final metrics). A new run that ends before its first checkpoint puts
the old one back: at once if it raised, or, after a kill, at the next ``fedlight fit`` into the
folder. A new run stopped later (a kill, a preemption, an error) leaves both: the old run stays
aside while ``--resume`` finishes the new one, a second ``--overwrite`` starts the new one again
(the old run still aside), and the old run comes back by hand (delete the folder's other entries,
then move those of ``.fedlight-replaced/`` up one level). Moves go through
``.fedlight-replaced.partial/`` (entry by entry, then one rename), so a kill halfway through
either move is finished by the next claim.

Every check that can refuse the folder runs before any of this: a refusal leaves it as it was.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from fedlight.config.files import dump_yaml, length_problem, output_folder_problem, read_yaml_mapping
from fedlight.config.schema import Recipe
from fedlight.engine.atomic_files import atomic_write_bytes
from fedlight.errors import UserError

CHECKPOINT = "checkpoints/last.pt"
RECIPE = "recipe.yaml"
RESULTS = "results.json"
LOCK = ".fedlight.lock"
REPLACED = ".fedlight-replaced"
MOVING = REPLACED + ".partial"
BOOKKEEPING = frozenset({LOCK, REPLACED, MOVING})  # entries that belong to the folder, not to a run
# recipe keys (or sections) a resumed run may change: rounds may grow, faults and the rendezvous's
# deadline model the cluster and run says where the run lives (a moved folder resumes), none of
# them is the experiment
NOT_THE_EXPERIMENT = ("rounds", "faults", "run", "fabric.rendezvous_timeout_min")
# recipe.yaml's record of what the run's classes were built with (``registry.resolved_settings``);
# where both runs hold one, the sections of constructor options are compared through it
RESOLVED = "resolved"
CONSTRUCTOR_SECTIONS = ("method", "server", "plugins")
# a run's recipe.yaml is a copy of its resolved recipe, written again when the run resumes
RECIPE_COPY_FIX = "it only records the run's recipe: delete it and rerun with --resume, which writes it again"


class _Lock:
    """An exclusive ``flock`` on a file that names its holder (PID and host)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, path: Path, folder: Path) -> _Lock:
        """Lock ``path`` without waiting, and write this process's PID and host into it.

        Raises:
            UserError: another process holds it (its PID named), or ``folder`` refuses the file.
        """
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise _not_writable(folder, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").split()
                os.close(fd)
                raise UserError(f"run folder '{folder}' is in use by another fedlight run "
                                f"({_describe_holder(holder)}); wait for it to end or stop it, "
                                "or set run.dir elsewhere") from None
            except OSError as exc:  # a file system without locks (some NFS / Lustre mounts)
                print(f"fedlight: warning: run folder '{folder}' cannot be locked ({exc.strerror}); "
                      "nothing stops a second run from using it at the same time", file=sys.stderr)
                return cls(path, fd)
            if _same_file(fd, path):
                break
            os.close(fd)  # its holder removed it while we opened it: lock the one there now
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Remove the file, then unlock it: a process that locks the removed file finds it gone and
        locks the one at its path instead (``acquire``)."""
        if self.fd is None:
            return
        try:
            if _same_file(self.fd, self.path):
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def _describe_holder(holder: list[str]) -> str:
    if not holder:
        return "its PID is not written yet"
    return f"PID {holder[0]}" + (f" on {holder[1]}" if len(holder) > 1 and holder[1] != socket.gethostname() else "")


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _not_writable(path: Path, exc: OSError) -> UserError:
    return UserError(f"run folder '{path}' is not writable ({exc.strerror}); set run.dir to a writable folder")


def has_checkpoint(path: Path) -> bool:
    """Whether the run folder ``path`` holds a checkpoint to resume (``load_checkpoint`` falls back to ``.prev``)."""
    return (path / CHECKPOINT).is_file() or (path / (CHECKPOINT + ".prev")).is_file()


def _results(path: Path) -> dict[str, Any] | None:
    """The run's ``results.json`` as a mapping; None when there is none, {} when it is not one."""
    try:
        found = json.loads((path / RESULTS).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):  # damaged, binary, nested past the recursion limit
        return {}
    return found if isinstance(found, dict) else {}


def is_finished(path: Path) -> bool:
    """Whether the run in ``path`` has finished: its ``results.json`` holds final metrics, written
    after its last round's checkpoint and its final logging."""
    return bool((_results(path) or {}).get("final"))


def _progress(results: dict[str, Any]) -> str:
    done = results.get("rounds_completed")
    rounds = f"{done} rounds" if isinstance(done, int) and not isinstance(done, bool) else "rounds"
    return f"finished after {rounds}" if results.get("final") else f"{rounds} done"


def finished_results(path: Path, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The results of the finished run in ``path`` that ``--resume`` with ``recipe`` would only repeat
    (every round done, final metrics logged), or None when there is something left to do.

    Raises:
        UserError: ``recipe`` is another experiment than the run's.
    """
    results = _results(path)
    if not results or not results.get("final") or not has_checkpoint(path) or (path / REPLACED).exists():
        return None
    if results.get("rounds_completed") != recipe["rounds"]:
        return None
    _check_same_experiment(path, recipe)
    return results


def _run_entries(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.name not in BOOKKEEPING] if path.is_dir() else []


def _move_entries(source: Path, target: Path) -> None:
    for entry in _run_entries(source):
        os.rename(entry, target / entry.name)


def _delete(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _move_aside(path: Path) -> None:
    """The run in ``path`` goes to ``path/.fedlight-replaced``."""
    moving = path / MOVING
    moving.mkdir()
    _move_entries(path, moving)
    os.rename(moving, path / REPLACED)


def _put_back(path: Path) -> None:
    """What ``path`` holds now goes; the run in ``path/.fedlight-replaced`` comes back."""
    for entry in _run_entries(path):
        _delete(entry)
    os.rename(path / REPLACED, path / MOVING)
    _finish_move(path)


def _finish_move(path: Path) -> None:
    """A move either way stopped halfway: ``path`` holds only the old run's entries, so the rest join them."""
    _move_entries(path / MOVING, path)
    (path / MOVING).rmdir()


def _recover(path: Path) -> None:
    """Finish what a killed run left half done: a move, or a replacement it never saved."""
    if (path / MOVING).is_dir():
        _finish_move(path)
    if (path / REPLACED).is_dir():
        if is_finished(path):  # the new run finished: it has replaced the old one
            shutil.rmtree(path / REPLACED)
        elif not has_checkpoint(path):  # the new run saved nothing: the old one comes back
            _put_back(path)
        # else the new run saved and stopped: both stay, the old one aside until the new one finishes


def with_later_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with what a later fedlight added filled in from its defaults, which keep the old
    behaviour: a key in a schema section, or a whole section (``new_device``); a run folder or a
    sweep written before an option existed resumes."""
    recipe = Recipe()
    defaults = asdict(recipe)
    sections = {k for k in defaults if is_dataclass(getattr(recipe, k))}
    filled = {k: {**defaults[k], **v} if k in sections and isinstance(v, dict) else v for k, v in saved.items()}
    return {**{k: defaults[k] for k in set(defaults) - set(saved)}, **filled}


def _differences(saved: dict[str, Any], recipe: dict[str, Any], ignore: tuple[str, ...]) -> list[str]:
    """The keys (``local.lr``, or a whole section) in which ``recipe`` differs from ``saved``."""
    out = []
    for k, v in saved.items():
        if k in ignore or v == recipe.get(k):
            continue
        new = recipe.get(k)
        if isinstance(v, dict) and isinstance(new, dict):
            out += [f"{k}.{key}" for key in sorted(set(v) | set(new))
                    if v.get(key) != new.get(key) and f"{k}.{key}" not in ignore]
        else:
            out.append(k)
    return out


def _check_same_experiment(path: Path, recipe: dict[str, Any]) -> None:
    """Refuse to resume the run in ``path`` with ``recipe`` (a ``run_record``) where it differs from the
    saved one; where both hold a ``resolved`` record, the method, server and plug-in sections are
    compared through it (with ``recipe`` holding none yet, ``preflight`` before torch loads, they are
    left to ``fit``'s claim). A run folder written before the record existed compares its recipe only."""
    saved_path = path / RECIPE
    if not saved_path.is_file():
        return
    saved = with_later_defaults(read_yaml_mapping(saved_path, "the run's recipe", RECIPE_COPY_FIX))
    recorded, resolved = saved.pop(RESOLVED, None), recipe.get(RESOLVED)
    through_record = CONSTRUCTOR_SECTIONS if isinstance(recorded, dict) else ()
    changed = sorted(_differences(saved, recipe, (*NOT_THE_EXPERIMENT, RESOLVED, *through_record)))
    if changed:
        raise UserError(f"--resume with a recipe that differs from '{saved_path}' in {', '.join(changed)}; "
                        "resume with the same recipe and overrides (rounds may grow), or use --overwrite")
    if through_record and isinstance(resolved, dict):
        _check_same_settings(saved_path, recorded, resolved)


def _settings(record: dict[str, Any]) -> dict[str, Any]:
    """A ``resolved`` record as ``{key: value}`` named as the recipe names them: ``method.temperature``,
    ``server.name``, ``model.backbone``, ``model.backbone.parameters``, ``plugins.marker.scale``."""
    out = {f"{section}.{k}": v for section in ("method", "server") for k, v in (record.get(section) or {}).items()}
    out.update({"model.backbone" if k == "name" else f"model.backbone.{k}": v
                for k, v in (record.get("backbone") or {}).items()})
    for name, options in (record.get("plugins") or {}).items():
        out[f"plugins.{name}"] = "on"
        out.update({f"plugins.{name}.{k}": v for k, v in (options or {}).items()})
    return out


def _check_same_settings(saved_path: Path, recorded: dict[str, Any], resolved: dict[str, Any]) -> None:
    """Refuse, naming the first key, where the installed code would build the run's method, server,
    backbone or plug-ins otherwise than the run recorded. An option only one side has is no
    difference (an option a later release adds keeps the old behaviour by default, as a recipe key
    does); a plug-in only one side has is."""
    old, new = _settings(recorded), _settings(resolved)
    plugins = {f"plugins.{name}" for name in {*(recorded.get("plugins") or {}), *(resolved.get("plugins") or {})}}
    changed = [k for k in old if k in new and old[k] != new[k]] + sorted(k for k in plugins if (k in old) != (k in new))
    if not changed:
        return
    key = changed[0]
    before, after = old.get(key, "off"), new.get(key, "off")
    fix = ("resume with the fedlight release that wrote the run" if key.startswith("model.backbone.")
           else f"set {key}={before} to resume as recorded" if key in new and key not in plugins
           else "resume with the same recipe and overrides")
    more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
    raise UserError(f"--resume: the run recorded {key}={before} (resolved, in '{saved_path}'), the installed "
                    f"fedlight would run {key}={after}{more}; {fix}, or use --overwrite")


def _plan(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool) -> tuple[bool, bool]:
    """(resume from its checkpoint, move the run there aside) for ``path`` as it is now.

    Raises:
        UserError: the folder does not fit the flags.
    """
    used = bool(_run_entries(path))
    if resume:
        if not has_checkpoint(path) and not (path / RECIPE).is_file():
            raise UserError(f"run folder '{path}' has no checkpoint to resume ({CHECKPOINT}); drop --resume")
        _check_same_experiment(path, recipe)
        results = _results(path)
        if not has_checkpoint(path) and results is not None:  # results.json comes after the first checkpoint
            what = "is a directory" if (path / CHECKPOINT).is_dir() else "is missing"
            raise UserError(f"run folder '{path}' has {RESULTS} ({_progress(results)}) but '{path / CHECKPOINT}' "
                            f"{what}: put the run's checkpoints back to resume it, or pass --overwrite instead "
                            "of --resume to train it again from round 0")
        # a run killed before its first checkpoint saved only its recipe: it starts again from round 0
        return has_checkpoint(path), not has_checkpoint(path)
    if used and not overwrite:
        raise UserError(f"run folder '{path}' is not empty; pass --resume to continue it, "
                        f"--overwrite to replace it, or set run.dir elsewhere{_kept_aside(path)}")
    return False, used


def _kept_aside(path: Path) -> str:
    """The words that say a run is kept in ``.fedlight-replaced`` while its replacement is unfinished."""
    if not (path / REPLACED).is_dir():
        return ""
    return (f" (the run it replaces is kept in '{path / REPLACED}' until it finishes; to get that one back, "
            f"delete the folder's other entries and move those in '{REPLACED}' up one level)")


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            return missing
        missing = folder
    return missing


def _remove_empty(path: Path, top: Path | None) -> None:
    """Remove the empty folders from ``path`` up to ``top`` (what this run created); stop at one that is not empty."""
    if top is None:
        return
    for folder in [path, *path.parents]:
        try:
            if folder.exists():
                folder.rmdir()
        except OSError:
            return
        if folder == top:
            return


class RunFolder:
    """Rank 0's hold on a run folder, from ``claim_run_dir`` to ``release``.

    Attributes:
        path: the run folder.
        resume: whether the run continues from the folder's checkpoint.
    """

    def __init__(self, path: Path, lock: _Lock, created: Path | None, resume: bool) -> None:
        self.path, self.resume = path, resume
        self._lock, self._created = lock, created

    def release(self) -> None:
        """The run ended: a run it replaced is gone if it finished, back if it saved nothing, else kept
        aside; a folder it made and left empty goes."""
        try:
            _recover(self.path)
        finally:
            empty = self._created is not None and not _run_entries(self.path)
            self._lock.release()
            if empty:
                _remove_empty(self.path, self._created)


def claim_run_dir(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool,
                  min_free_mb: int = 0) -> RunFolder:
    """Lock ``path`` for this run and make it ready, or refuse it in one line with the folder as it was.

    A used folder needs ``resume`` (the same experiment: ``recipe`` is compared with the saved
    one) or ``overwrite``; the disk must have ``min_free_mb`` MiB free and the folder must take
    writes. A run it replaces is moved aside, not deleted (see the module docstring).

    Raises:
        UserError: the flags contradict each other or do not fit the folder, it is held by another
            run, it is not writable, or its disk is too full.
    """
    _check_flags_and_disk(path, resume, overwrite, min_free_mb)
    created = _first_missing(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(path, created)
        raise _not_writable(path, exc) from None
    try:
        lock = _Lock.acquire(path / LOCK, path)
    except UserError:
        _remove_empty(path, created)  # a folder another run has just locked is not empty: it stays
        raise
    folder = RunFolder(path, lock, created, resume=False)
    try:
        _recover(path)
        folder.resume, replace = _plan(path, recipe, resume, overwrite)
        _probe_writes(path)
        if replace and (path / REPLACED).is_dir():  # an unfinished replacement: the run it replaces stays aside
            for entry in _run_entries(path):
                _delete(entry)
        elif replace:
            _move_aside(path)
    except BaseException:
        folder.release()
        raise
    return folder


def check_run_dir(path: Path, recipe: dict[str, Any], resume: bool, overwrite: bool, min_free_mb: int = 0) -> None:
    """Refuse ``path`` as ``claim_run_dir`` would, only reading: no lock taken, no folder made, nothing moved.

    ``fedlight fit`` asks before it imports torch, so a wrong flag or a folder in the way is one
    line within a second, not after the 7-9 s of imports. Two refusals stay the claim's: a folder
    another run holds (only the lock tells) and one a killed run left half replaced (the claim
    finishes that move first, under the lock, which can change what the folder holds).

    Raises:
        UserError: as ``claim_run_dir``.
    """
    _check_flags_and_disk(path, resume, overwrite, min_free_mb)
    problem = output_folder_problem(path)
    if problem:
        raise UserError(f"run folder: {problem}; set run.dir to a writable folder")
    if not (path / MOVING).exists() and not (path / REPLACED).exists():
        _plan(path, recipe, resume, overwrite)


def _check_flags_and_disk(path: Path, resume: bool, overwrite: bool, min_free_mb: int) -> None:
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other; pass only one")
    too_long = length_problem(path)
    if too_long:
        raise UserError(f"run.dir {too_long}; set run.dir to a shorter path")
    check_free_space(path, min_free_mb)


def _probe_writes(path: Path) -> None:
    try:
        probe = path / ".write-test"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as exc:
        raise _not_writable(path, exc) from None


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
    _write_atomically(path, (json.dumps(obj, indent=2) + "\n").encode())


def write_yaml(path: Path, obj: Any) -> None:
    _write_atomically(path, dump_yaml(obj).encode())


def _write_atomically(path: Path, data: bytes) -> None:
    atomic_write_bytes(path, data)
