"""The SLURM side of a sweep: render ``slurm/array.sbatch``, build and run ``sbatch --array``."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from fedlight.errors import UserError

TEMPLATES = Path(__file__).resolve().parents[1] / "bundled" / "slurm"  # package data (pyproject.toml)


def render_array_script(out: Path, name: str, python: str = sys.executable, cwd: Path | None = None) -> str:
    """``slurm/array.sbatch`` with the sweep folder, job name, Python and working folder filled in."""
    template = TEMPLATES / "array.sbatch"
    if not template.is_file():
        raise UserError(f"SLURM template '{template}' is missing; reinstall fedlight (its package data holds it)")
    fields = {"@OUT@": str(out), "@NAME@": name, "@PYTHON@": python, "@CWD@": str(cwd or Path.cwd())}
    text = template.read_text()
    for placeholder, value in fields.items():
        text = text.replace(placeholder, value)
    return text


def array_spec(indices: list[int], max_running: int | None) -> str:
    """``[0, 1, 2, 5]``, 4 -> ``'0-2,5%4'``: consecutive indices become ranges."""
    parts, start = [], None
    for i, idx in enumerate(indices):
        if start is None:
            start = idx
        if i + 1 == len(indices) or indices[i + 1] != idx + 1:
            parts.append(str(start) if start == idx else f"{start}-{idx}")
            start = None
    return ",".join(parts) + (f"%{max_running}" if max_running else "")


# sbatch options the sweep sets itself: the array (its tasks are the manifest's), the working folder and the logs
OWNED_SBATCH = {"--array": "-a", "--chdir": "-D", "--output": "-o", "--error": "-e"}


def split_slurm_args(slurm_args: str) -> list[str]:
    """``--slurm-args`` as sbatch options, split like a shell line; raises a UserError on bad quotes, or on an
    option the sweep sets (sbatch takes the last of a repeated option, so ``--array`` would run other tasks
    than the manifest lists, ``--chdir`` read relative paths elsewhere, ``--output`` move the logs)."""
    try:
        args = shlex.split(slurm_args)
    except ValueError as exc:
        raise UserError(f"--slurm-args '{slurm_args}' cannot be split like a shell line ({exc}); fix its quotes") from None
    for arg in args:
        owned = next((long for long, short in OWNED_SBATCH.items()
                      if arg == long or arg.startswith(long + "=") or arg.startswith(short) and not arg.startswith("--")),
                     None)
        if owned:
            raise UserError(f"--slurm-args '{slurm_args}': {owned} is the sweep's own (its tasks, folder and logs are "
                            "the manifest's); drop it (--max-running limits the tasks at once)")
    return args


def sbatch_command(script: Path, indices: list[int], max_running: int | None, extra: list[str]) -> list[str]:
    """``sbatch --parsable --array=... [extra sbatch options] script``."""
    return ["sbatch", "--parsable", f"--array={array_spec(indices, max_running)}", *extra, str(script)]


def require_sbatch() -> None:
    """Raise a UserError unless ``sbatch`` is on PATH."""
    if shutil.which("sbatch") is None:
        raise UserError("--submit needs SLURM's sbatch, which is not on PATH; run where SLURM is installed, "
                        "or drop --submit and submit the printed command yourself")


def submit(command: list[str]) -> str:
    """Run ``sbatch``; returns the job id (a failure raises a UserError with sbatch's message)."""
    proc = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["no message"]
        raise UserError(f"sbatch failed (exit {proc.returncode}): {lines[-1]}; command: {shlex.join(command)}")
    return proc.stdout.strip().split(";")[0]


def queued_tasks(job_ids: list[str]) -> set[int] | None:
    """Array indices of ``job_ids`` still pending or running (``squeue``); None when SLURM can't say."""
    if not job_ids or shutil.which("squeue") is None:
        return None if job_ids else set()
    proc = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(job_ids)], capture_output=True, text=True)
    if proc.returncode != 0:  # jobs that left the controller's memory long ago are not queued
        return set() if "invalid job id" in proc.stderr.lower() else None
    tasks = (line.rsplit("_", 1)[1] for line in proc.stdout.split() if "_" in line)
    return {int(t) for t in tasks if t.isdigit()}

