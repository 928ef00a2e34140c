"""`make quickstart` / `make test` and scripts/setup.sh refuse a wrong TORCH or PYTHON in one line, before
anything runs. Nothing is installed here: make runs dry (``-n``) and the script only checks (``check``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _make(*args: str) -> subprocess.CompletedProcess:
    """``make -n`` (print the commands, run none) in the repository with ``args``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "TORCH", "VENV", "MAKEFLAGS")}
    return subprocess.run(["make", "-n", "--no-print-directory", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("value", ["bogus", "CPU"])
def test_an_unknown_torch_is_one_line_naming_the_choices(value: str) -> None:
    """Before, make ran the set-up with it: TORCH=CPU (a typo of cpu) installed the CUDA build."""
    done = _make("quickstart", f"TORCH={value}")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    (line,) = done.stderr.splitlines()
    assert f"TORCH={value} is not one of default" in line and "set TORCH=default or TORCH=cpu" in line


@pytest.mark.parametrize("python", ["/nonexistent", "/nonexistent/bin/python"])
def test_a_python_that_cannot_run_is_one_line_naming_it(python: str) -> None:
    """Before, make ran the set-up, which ended in 5-6 lines and make's Error 127, and a PYTHON whose
    folder does not exist became '/python' (a failed cd was ignored)."""
    done = _make("test", f"PYTHON={python}")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    (line,) = done.stderr.splitlines()
    assert f"setup: PYTHON={python} is no interpreter that can be run" in line

    env = {**os.environ, "PYTHON": python, "TORCH": "default"}
    checked = subprocess.run(["bash", "scripts/setup.sh", "check"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 2 and checked.stderr.splitlines() == [line[line.index("setup:"):-len(".  Stop.")]]


def test_good_values_go_ahead() -> None:
    done = _make("quickstart", "TORCH=cpu", f"PYTHON={sys.executable}")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert f"PYTHON={sys.executable} TORCH=cpu bash scripts/setup.sh quickstart" in done.stdout
