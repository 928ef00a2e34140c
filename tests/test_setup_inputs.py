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


def test_uv_gets_pips_indexes_find_links_and_constraints() -> None:
    """uv reads none of pip's configuration: without these, the venv's uv would skip the indexes and the
    version caps pip is configured with (here: a local mirror, and a torch cap)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("uv_settings", REPO / "scripts" / "uv_settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pip_config = ("global.constraint='/etc/caps.txt'\n"
                  "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'\n"
                  "global.find-links='/opt/wheels /opt/more'\n"
                  ":env:.index-url='https://mirror.example/simple'\n"
                  "user.index-url='https://ignored.example/simple'\n"  # a PIP_* variable wins over pip's files
                  "global.timeout='60'\n")
    assert module.uv_exports(pip_config) == [
        "export UV_CONSTRAINT=/etc/caps.txt",
        "export UV_EXTRA_INDEX_URL='file:///opt/a/simple file:///opt/b/simple'",
        "export UV_FIND_LINKS=/opt/wheels,/opt/more",
        "export UV_DEFAULT_INDEX=https://mirror.example/simple",
        "export UV_INDEX_STRATEGY=unsafe-best-match",  # pip's choice: the best version on any index
    ]
    assert module.uv_exports("global.timeout='60'\n") == []


def test_an_unknown_installer_is_one_line_naming_the_choices() -> None:
    env = {**os.environ, "INSTALLER": "conda"}
    checked = subprocess.run(["bash", "scripts/setup.sh", "check"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 2
    assert checked.stderr == "setup: INSTALLER=conda is not one of uv or pip; set INSTALLER=uv or INSTALLER=pip\n"
