"""``cli_process``: a forked ``python -m fedlight`` is a process like a fresh one: its own folder,
environment, output, exit code and signals; and the server it is forked from holds no thread."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from multiprocessing import forkserver
from pathlib import Path

import cli_process
from test_extensions import install

REPO = Path(__file__).resolve().parents[1]


def test_a_command_runs_in_its_folder_with_its_environment_and_exit_code(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("rounds: 7\n")
    site = tmp_path / "site"
    install(site, "forked_pkg", {"m.py": "class X:\n    '''Found through this PYTHONPATH.'''\n"},
            "[fedlight.backbones]\nforked_net = forked_pkg.m:X\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}

    shown = cli_process.run(["fit", "--recipe", "r.yaml", "--print-recipe"], env=env, cwd=tmp_path)  # a relative path
    assert shown.returncode == 0 and "rounds: 7" in shown.stdout, shown.stderr
    listed = cli_process.run(["methods"], env=env)
    assert listed.returncode == 0 and "forked_net  Found through this PYTHONPATH." in listed.stdout, listed.stderr
    assert "forked_net" not in cli_process.run(["methods"]).stdout  # this process's environment: not installed

    wrong = cli_process.run(["fit", "--recipe", "r.yaml", "rounds=x"], cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stdout == "" and wrong.stderr.count("\n") == 1, wrong
    assert wrong.stderr.startswith("fedlight: error: ") and "rounds" in wrong.stderr


def test_a_signal_reaches_the_process_and_its_code_says_so(tmp_path: Path, tiny_recipe: Path) -> None:
    command = ["-m", "fedlight", "fit", "--recipe", str(tiny_recipe), "rounds=1000"]
    with cli_process.start(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
        assert process.pid != os.getpid() and process.poll() is None
        deadline = time.monotonic() + 300  # bounds the wait for its run folder, times nothing
        while not (tmp_path / "run").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL and process.returncode == -9


def test_the_server_forks_from_one_thread() -> None:
    """A fork copies only the thread that forks: a lock another thread held (an OpenMP pool, a logging
    handler) would stay locked in every child. The server only imports, so it has no other thread."""
    assert cli_process.run(["recipes"]).returncode == 0  # the server is up
    server = forkserver._forkserver._forkserver_pid
    assert server is not None and os.listdir(f"/proc/{server}/task") == [str(server)]


def test_a_script_runs_as_main_and_the_server_touched_no_gpu(tmp_path: Path) -> None:
    """A fork after CUDA is initialised breaks the child's CUDA, and a device count cached before the
    fork would ignore the child's CUDA_VISIBLE_DEVICES: the server must have done neither."""
    script = tmp_path / "probe.py"
    script.write_text("import sys\nimport torch\n"
                      "print(__name__, sys.argv[1:], sys.path[0], torch.cuda.is_initialized(), "
                      "getattr(torch.cuda, '_cached_device_count', None))\n")
    done = cli_process.run_python([str(script), "a", "b"], env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["__main__", "['a',", "'b']", str(tmp_path), "False", "None"]


def test_the_child_takes_its_own_omp_num_threads(tmp_path: Path) -> None:
    """OpenMP reads OMP_NUM_THREADS once, as torch loads it (in the server): the child's must count,
    as it does in a fresh process (a sweep's tasks run with one thread each: two threads each, on
    two busy cores, took twice as long)."""
    script = tmp_path / "threads.py"
    script.write_text("import torch\nprint(torch.get_num_threads())\n")
    for threads, expected in (("1", 1), ("3", 3), (None, len(os.sched_getaffinity(0)))):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        done = cli_process.run_python([str(script)], env=env if threads is None else {**env, "OMP_NUM_THREADS": threads})
        assert done.stdout.split() == [str(expected)], (threads, done.stderr)

