"""The shell command that runs fedlight here, for the commands fedlight prints for a person to run
(the one that resumes an interrupted run, a written recipe's run, a finished run's export).

``fedlight`` works only where the environment that holds it is on ``PATH`` (an activated ``.venv``);
``make quickstart`` runs ``.venv/bin/python -m fedlight`` in a shell where it is not, and a
printed ``fedlight fit ... --resume`` would then fail with "command not found".
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys


def fedlight_command(*args: str) -> str:
    """``fedlight ARGS`` as one shell line that runs in this process's shell and folder: ``fedlight``
    where the one on ``PATH`` sits beside this interpreter (the same environment), else this
    interpreter with ``-m fedlight`` (relative to the current folder when inside it:
    ``.venv/bin/python -m fedlight ...``).

    Args:
        args: the command line after ``fedlight`` (``fit``, ``--recipe``, ...), quoted here as needed.
    """
    python = os.path.abspath(sys.executable)  # not realpath: a venv's python links to the base one
    found = shutil.which("fedlight")
    if found and os.path.dirname(os.path.abspath(found)) == os.path.dirname(python):
        return shlex.join(["fedlight", *args])
    here = os.getcwd()
    if python.startswith(here + os.sep):
        python = os.path.relpath(python, here)
    return shlex.join([python, "-m", "fedlight", *args])
