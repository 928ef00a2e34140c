"""The README's commands work as written: every ```bash block of README.md, in order, in a fresh login
shell, as a person pastes them after cloning; and the commands fedlight prints for a person to run
work in the shell it was started from.

How the README test keeps it to seconds (and how to keep a README command runnable by it):

- ``make quickstart`` runs what ``make -n quickstart`` prints, less the set-up line: ``.venv`` is a link
  to this interpreter's environment, never rebuilt (``tests/test_setup_inputs.py`` checks the set-up's
  inputs). Other ``make`` targets do not belong in a bash block (``make test`` would run this suite).
- Each ``fedlight fit`` and ``fedlight sweep`` (``python -m fedlight`` too) gets ``TINY`` appended: the
  same commands on synthetic data, 2 clients and a small network. An override there has to hold for
  every arm of a sweep (no ``method.*`` key, which an arm's class may not take).
- A server (``tensorboard``) passes once it says where it serves, and is stopped.

The shell starts with a clean environment (``bash -l``: the system's PATH, a fresh HOME), so a
command that needs ``.venv`` active fails here as it fails for a person who did not activate it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedlight.invocation import fedlight_command

REPO = Path(__file__).resolve().parents[1]
TINY = ["data.name=synthetic", "clients.num=2", "partition.min_size=5", "local.batch_size=64",
        "model.backbone=tiny_cnn", "eval.probe_epochs=5", "eval.knn_k=20", "eval.projector_samples=50",
        "fabric.accelerator=cpu", "fabric.threads=1"]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="the README's set-up is `make quickstart`")
FEDLIGHT_RUN = re.compile(r"^(fedlight|\S*python3?(\.\d+)? -m fedlight) (fit|sweep)\b")
SERVE = '''serve_briefly() {  # a server the README starts: passes once it says where it serves, then stopped
  "$@" > serve.log 2>&1 & local pid=$!
  for _ in $(seq 600); do
    if grep -q "http://" serve.log; then kill $pid; wait $pid || true; return 0; fi
    kill -0 $pid 2>/dev/null || break; sleep 0.1
  done
  cat serve.log >&2; kill $pid 2>/dev/null; return 1
}
'''


def bash_commands(markdown: str) -> list[str]:
    """The commands of every ```bash block, in order: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", markdown, re.S | re.M):
        for line in re.sub(r"\\\n\s*", "", block).splitlines():
            line = re.sub(r"(^|\s+)#\s.*$", "", line).strip()  # a comment: `# ...` (no README command quotes one)
            if line:
                commands.append(line)
    return commands


def shell_lines(command: str) -> list[str]:
    """``command`` as the test runs it (module docstring)."""
    if command.startswith("make "):
        assert command == "make quickstart", f"{command!r}: only make quickstart belongs in a bash block of the README"
        made = subprocess.run(["make", "-n", "--no-print-directory", "quickstart"], cwd=REPO, capture_output=True,
                              text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "MAKEFLAGS"})
        assert made.returncode == 0, made.stderr
        return [line for run in made.stdout.splitlines() if "scripts/setup.sh" not in run for line in shell_lines(run)]
    if FEDLIGHT_RUN.match(command):
        return [f"{command} {shlex.join(TINY)}"]
    if command.startswith("tensorboard "):
        return [f"serve_briefly {command} --port 0"]
    return [command]


def link_environment(venv: Path) -> None:
    """``venv`` as this interpreter's environment: a link to it where it is a venv (its
    ``bin/activate`` then puts its bin on PATH), else a stand-in that does what activation does."""
    if (Path(sys.prefix) / "bin" / "activate").is_file():
        venv.symlink_to(sys.prefix, target_is_directory=True)
        return
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "activate").write_text(f'export PATH={shlex.quote(os.path.dirname(sys.executable))}:"$PATH"\n')


@needs_make
def test_every_bash_block_of_the_readme_runs_in_order_in_a_fresh_shell(tmp_path: Path) -> None:
    commands = bash_commands((REPO / "README.md").read_text())
    assert commands[:2] == ["make quickstart", "source .venv/bin/activate"]  # the set-up the README promises
    assert any(c.startswith("tensorboard ") for c in commands) and any(FEDLIGHT_RUN.match(c) for c in commands)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(), home.mkdir()
    for folder in ("recipes", "configs", "slurm"):  # a clone's folders, without its run folders
        (work / folder).symlink_to(REPO / folder, target_is_directory=True)
    link_environment(work / ".venv")
    trace = "PS4='+ [${SECONDS} s] '\nset -x\n"  # each command on stderr, with the seconds so far
    script = "set -euo pipefail\n" + trace + SERVE + "\n".join(line for c in commands for line in shell_lines(c)) + "\n"
    (tmp_path / "readme.sh").write_text(script)
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb",
           "PYTHONPATH": str(REPO),  # this checkout's code wins over the environment's install, as in every test
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", "-l", str(tmp_path / "readme.sh")], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = (work / "runs/quickstart_fmnist/results.json").read_text()
    assert '"rounds_completed": 8' in results  # the quickstart's 6, then the tour's --resume to 8
    assert (work / "runs/quickstart_fmnist/encoder.pt").is_file()
    assert "compare.md" in done.stdout and "| fedprox |" in done.stdout


@needs_make
def test_make_quickstart_says_how_to_put_fedlight_on_path() -> None:
    """In a fresh shell after `make quickstart`, `fedlight` is "command not found" until the venv is
    active: make's last line says so (its venv only; an interpreter of your own has its own PATH)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VENV", "MAKEFLAGS")}
    made = subprocess.run(["make", "-n", "--no-print-directory", "quickstart"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "run 'source .venv/bin/activate' to put them on PATH" in made.stdout.splitlines()[-1]
    own = subprocess.run(["make", "-n", "--no-print-directory", "quickstart", f"PYTHON={sys.executable}"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=60)
    assert "activate" not in own.stdout


def test_a_printed_command_is_fedlight_where_the_fedlight_on_path_is_this_interpreters(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    bin_ = tmp_path / "env" / "bin"
    bin_.mkdir(parents=True)
    for name in ("python", "fedlight"):
        (bin_ / name).write_text("#!/bin/sh\n")
        (bin_ / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_ / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_}:/usr/bin:/bin")  # activated
    assert fedlight_command("fit", "--recipe", "my run.yaml", "--resume") == "fedlight fit --recipe 'my run.yaml' --resume"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a fresh shell: this interpreter, by its path from here
    assert fedlight_command("fit", "--resume") == "env/bin/python -m fedlight fit --resume"
    monkeypatch.chdir("/")
    assert fedlight_command("fit") == f"{bin_}/python -m fedlight fit"
    other = tmp_path / "other"  # a fedlight of another environment on PATH: not this run's
    other.mkdir()
    (other / "fedlight").write_text("#!/bin/sh\n")
    (other / "fedlight").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:/usr/bin:/bin")
    assert fedlight_command("fit") == f"{bin_}/python -m fedlight fit"
