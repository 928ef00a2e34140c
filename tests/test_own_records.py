"""Nothing a command writes lands on a run's or a sweep's own records, or on another file without
``--overwrite``; a write stopped by Ctrl-C or SIGTERM leaves no temporary file; ``--resume`` goes
with no command that starts no run."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import QUICK_EVAL, REPO, SMALL_RUN, TINY
from fedlight import atomic_files
from fedlight.atomic_files import LEFTOVER, atomic_write_bytes
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.run import own_records
from fedlight.engine.run.fit import fit


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 1-round run of the tiny recipe (copied by the tests that write near it)."""
    tmp = tmp_path_factory.mktemp("records")
    (tmp / "tiny.yaml").write_text(TINY.format(repo=REPO))
    fit(load_recipe(tmp / "tiny.yaml", [*QUICK_EVAL, *SMALL_RUN, "rounds=1", f"run.dir={tmp / 'run'}"]))
    return tmp / "run"


@pytest.fixture
def place(finished: Path, tmp_path: Path) -> Path:
    """A folder holding ``run`` (a copy of the finished run), ``other`` (another one), a sweep with that run
    as its task, and ``mine.pt``, a user's file."""
    shutil.copytree(finished, tmp_path / "run")
    shutil.copytree(finished, tmp_path / "other")
    shutil.copytree(finished, tmp_path / "sweep/runs/a")
    (tmp_path / "sweep/manifest.json").write_text('{"tasks": []}')
    (tmp_path / "sweep/recipes").mkdir()
    (tmp_path / "sweep/recipes/a.yaml").write_text("seed: 3\n")
    (tmp_path / "mine.pt").write_bytes(b"the user's own file")
    return tmp_path


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(capsys, named: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and named in err, err
    return err


RECORDS = ["other/results.json", "run/checkpoints/last.pt", "run/recipe.yaml", "run/checkpoints/last.pt.sha256",
           "sweep/manifest.json", "sweep/recipes/a.yaml", "sweep/runs/a/results.json"]


@pytest.mark.parametrize("target", RECORDS)
@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
def test_export_never_writes_over_a_record(place: Path, capsys, target: str, overwrite: bool) -> None:
    """It replaced any file silently: another run's results.json, the run's own checkpoint, a sweep's manifest."""
    kept = files(place)
    capsys.readouterr()
    code = main(["export", str(place / "run"), "--out", str(place / target), *(["--overwrite"] * overwrite)])
    err = one_error_line(capsys, f"'{place / target}' is a record of ")
    assert code == 2 and "not even with --overwrite" in err and "give --out another file" in err, err
    assert files(place) == kept


def test_export_replaces_another_file_only_with_overwrite(place: Path, capsys) -> None:
    mine = place / "mine.pt"
    capsys.readouterr()
    assert main(["export", str(place / "run"), "--out", str(mine)]) == 2
    one_error_line(capsys, f"--out: '{mine}' exists; add --overwrite to replace it")
    assert mine.read_bytes() == b"the user's own file"
    assert main(["export", str(place / "run"), "--out", str(place / "sweep")]) == 2  # a folder, flag or not
    one_error_line(capsys, f"--out: '{place / 'sweep'}' is a folder")
    assert main(["export", str(place / "run"), "--out", str(mine), "--overwrite"]) == 0
    assert mine.read_bytes().startswith(b"PK")  # a torch file now
    assert main(["export", str(place / "sweep/runs/a")]) == 0  # beside a sweep's run: its default file is no record
    assert (place / "sweep/runs/a/encoder.pt").is_file()


@pytest.mark.parametrize("target", ["run/checkpoints/last.pt", "run/results.json", "run/recipe.yaml",
                                    "sweep/manifest.json"])
def test_write_recipe_never_writes_over_a_record_even_with_overwrite(place: Path, capsys, target: str) -> None:
    recipe = place / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    kept = files(place)
    capsys.readouterr()
    assert main(["fit", "--recipe", str(recipe), "--write-recipe", str(place / target), "--overwrite"]) == 2
    one_error_line(capsys, f"--write-recipe: '{place / target}' is a record of ")
    assert files(place) == kept
    assert main(["fit", "--recipe", str(recipe), "--write-recipe", str(place / "mine.pt"), "--overwrite"]) == 0


@pytest.mark.parametrize("flag", ["--write-recipe", "--print-recipe"])
def test_resume_with_a_command_that_starts_no_run_is_refused(tmp_path: Path, capsys, flag: str) -> None:
    """``fit --write-recipe w.yaml --resume`` wrote the file and ignored --resume."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    args = [flag, str(tmp_path / "w.yaml")] if flag == "--write-recipe" else [flag]
    capsys.readouterr()
    assert main(["fit", "--recipe", str(recipe), *args, "--resume"]) == 2
    one_error_line(capsys, f"--resume continues a run, which {flag} does not start; drop one of them")
    assert not (tmp_path / "w.yaml").exists() and capsys.readouterr().out == ""


def test_the_sweep_records_are_the_sweeps_own_names() -> None:
    from fedlight.sweep import command, manifest, tensorboard_view

    out = Path("/s")
    named = {manifest.MANIFEST, manifest.NAMES, command.SCRIPT, tensorboard_view.LINKS,
             manifest.recipe_path(out, "a").parent.name, "logs"}
    assert named == set(own_records.SWEEP_RECORDS)


def _interrupted_midway(path: Path, data: bytes) -> None:
    """``write_synced`` that writes half, then is stopped by Ctrl-C."""
    path.write_bytes(data[: len(data) // 2])
    raise KeyboardInterrupt


def test_ctrl_c_during_export_leaves_no_temporary_file(place: Path, capsys, monkeypatch) -> None:
    """A Ctrl-C while export wrote left a full-size .encoder.pt.<hex>.tmp in the run folder."""
    run = place / "run"
    kept = files(run)
    monkeypatch.setattr(atomic_files, "write_synced", _interrupted_midway)
    assert main(["export", str(run)]) == 130
    assert files(run) == kept  # neither encoder.pt nor a temporary file


STOPPED_MIDWAY = """
import os, signal, sys
from pathlib import Path
from fedlight import atomic_files

def stopped(path, data):
    with open(path, "wb") as f:
        f.write(data[:4096])
        f.flush()
        os.kill(os.getpid(), signal.SIGTERM)
        f.write(data[4096:])

atomic_files.write_synced = stopped
atomic_files.atomic_write_bytes(Path(sys.argv[1]), bytes(1 << 20))
print("not stopped")
"""


def test_sigterm_during_a_write_removes_the_temporary_file_then_ends_the_process(tmp_path: Path) -> None:
    target = tmp_path / "encoder.pt"
    target.write_bytes(b"old")
    proc = subprocess.run([sys.executable, "-c", STOPPED_MIDWAY, str(target)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(Path(atomic_files.__file__).parents[1])})
    assert proc.returncode == -signal.SIGTERM and "not stopped" not in proc.stdout, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder.pt"] and target.read_bytes() == b"old"


def test_a_handler_of_sigterm_is_kept_and_its_exception_removes_the_file(tmp_path: Path, monkeypatch) -> None:
    """A process that handles SIGTERM itself (a sweep raises KeyboardInterrupt) keeps its handler."""
    monkeypatch.setattr(atomic_files, "write_synced", lambda path, data: (path.write_bytes(data[:3]),
                                                                         os.kill(os.getpid(), signal.SIGTERM)))
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_write_bytes(tmp_path / "f", b"abcdef")
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []


def test_export_removes_the_temporary_file_a_killed_export_left_not_a_live_one(place: Path) -> None:
    run = place / "run"
    stray, live = run / ".encoder.pt.0123abcd.tmp", run / ".encoder.pt.89abcdef.tmp"
    other = run / ".results.json.0123abcd.tmp"  # not export's: left to fit's next claim
    for path in (stray, live, other):
        path.write_bytes(b"x" * 1000)
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a live write holds its file
    try:
        assert main(["export", str(run)]) == 0
    finally:
        os.close(held)
    assert not stray.exists() and live.exists() and other.exists() and (run / "encoder.pt").is_file()
    assert all(LEFTOVER.fullmatch(p.name) for p in (stray, live, other))
