"""A run's threads follow the CPUs this process may use, a busy machine is named in one line, and a sweep
task's share is what its environment says and its provenance records."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import QUICK_EVAL, SMALL_RUN
from fedlight import cpus
from fedlight.cli import main
from fedlight.sweep.local import task_environment


@pytest.mark.parametrize("files, cpus_allowed", [
    ({"cpu.max": "200000 100000\n"}, 2), ({"cpu.max": "150000 100000\n"}, 2), ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None), ({}, None),
    ({"cpu.max": "garbage\n"}, None),
])
def test_the_cgroup_quota_in_cpus(tmp_path: Path, files: dict[str, str], cpus_allowed: int | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpus.cgroup_cpus(tmp_path) == cpus_allowed


def test_default_threads_are_omp_num_threads_else_this_process_cpus_over_its_ranks(monkeypatch) -> None:
    monkeypatch.setattr(cpus, "usable_cpus", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert (cpus.default_threads(), cpus.default_threads(2), cpus.default_threads(16)) == (8, 4, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpus.default_threads(2) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert cpus.default_threads(2) == 4


def test_a_sweep_task_gets_its_share_of_the_cpus_unless_told(monkeypatch) -> None:
    monkeypatch.setattr("fedlight.sweep.local.usable_cpus", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [task_environment(p)["OMP_NUM_THREADS"] for p in (1, 2, 3, 16)] == ["8", "4", "2", "1"]
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert task_environment(2)["OMP_NUM_THREADS"] == "5"


def test_a_busy_machine_is_one_warning_line_and_the_threads_are_recorded(tmp_path: Path, tiny_recipe: Path,
                                                                         monkeypatch, capsys) -> None:
    monkeypatch.delenv(cpus.QUIET)
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = tmp_path / "run"
    assert main(["fit", "--recipe", str(tiny_recipe), *QUICK_EVAL, *SMALL_RUN, "rounds=1", f"run.dir={run}"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "machine is busy" in line]
    assert len(warned) == 1 and "load 64.0 on" in warned[0] and "fabric.threads=1" in warned[0]
    assert json.loads((run / "results.json").read_text())["provenance"]["threads"] == 1
    monkeypatch.setenv(cpus.QUIET, "1")
    assert cpus.busy_machine() is None
