"""Nothing leaves the machine and nothing lands in ``$HOME``: a run with every logger, in a process whose
home, XDG folders and temporary folder are fresh, writes only its run folder (fedlight/stays_local.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import QUICK_EVAL, REPO, SMALL_RUN, TINY

LOGGERS = "loggers=[tensorboard,csv,wandb,mlflow]"
XDG = ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")


def test_a_run_with_every_logger_leaves_home_xdg_and_temp_as_they_were(tmp_path: Path) -> None:
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    home, temp = tmp_path / "home", tmp_path / "temp"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TMPDIR": str(temp), "OMP_NUM_THREADS": "1",
           **{name: str(tmp_path / name.lower()) for name in XDG}}  # no MLFLOW_*, WANDB_*, DO_NOT_TRACK, CI
    for folder in (home, temp, *(Path(env[name]) for name in XDG)):
        folder.mkdir()
    done = subprocess.run([sys.executable, "-m", "fedlight", "fit", "--recipe", str(recipe), "rounds=1", LOGGERS,
                           *SMALL_RUN, *QUICK_EVAL, f"run.dir={tmp_path / 'run'}"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"mlruns", "wandb", "csv", "tensorboard"}
    for name in ("home", *(n.lower() for n in XDG)):
        assert [str(p) for p in (tmp_path / name).rglob("*")] == [], name  # ~/.config/mlflow/telemetry.json, ...
    left = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]  # torch's own, documented
    assert left == []  # W&B's *wandb-media, *wandb-artifacts; the cache folder


def test_importing_fedlight_turns_telemetry_off_and_keeps_what_the_user_set(tmp_path: Path) -> None:
    code = ("import os, fedlight; from mlflow.telemetry.utils import is_telemetry_disabled; "
            "print(is_telemetry_disabled(), os.environ['WANDB_ERROR_REPORTING'], os.environ['MPLCONFIGDIR'])")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FEDLIGHT_CACHE_DIR": str(tmp_path / "c"),
           "WANDB_ERROR_REPORTING": "true"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "true", str(tmp_path / "c" / "matplotlib")], done.stderr
