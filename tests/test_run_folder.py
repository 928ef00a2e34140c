"""The run folder is never lost: every refusal comes before anything is deleted or written, one run
holds a folder at a time, a run it replaces goes only once the new one has saved, a run killed
before its first checkpoint can be resumed, and a moved folder resumes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml

import cli_process
from conftest import QUICK_EVAL, REPO, SMALL_RUN, TINY
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.run import launch, run_folder as rundir
from fedlight.engine.run.fit import fit
from fedlight.engine.run.run_folder import claim_run_dir
from fedlight.engine.state.run_files import write_yaml
from fedlight.errors import UserError

# runs whose point is the run folder, not what is learnt: a small network on 400 samples
FAST = [*QUICK_EVAL, *SMALL_RUN]
ALL_DIVERGE = ["faults.diverge=1", "faults.max_bad_clients=0"]  # every client of round 1 diverges: the run stops


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` (relative path -> bytes), or None if there is no such folder."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(args: list[str], capsys, named: str, alone: bool = True) -> str:
    """``fedlight *args`` fails as a user error should: exit 2 and one error line naming ``named``, alone
    on stderr unless the run had started (then progress bars and client events come before it)."""
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err, err
    if alone:
        assert err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    assert named in line, err
    return line


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 2-round run of the tiny recipe (copied by ``used``, never changed)."""
    tmp = tmp_path_factory.mktemp("finished")
    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    fit(load_recipe(recipe, [*FAST, f"run.dir={tmp / 'run'}"]))
    return tmp / "run"


@pytest.fixture
def used(finished: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """(``fit`` arguments for the tiny recipe in a copy of the finished run, that run folder)."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO) + f"run: {{dir: {run}}}\n")
    return ["fit", "--recipe", str(recipe), *FAST], run


def _damage_checkpoints(run: Path) -> None:
    for name in ("last.pt", "last.pt.prev"):
        (run / "checkpoints" / name).write_bytes(b"\0" * 10)


def _damage_record(section: str | None) -> Callable[[Path], None]:
    """Replace the run's ``resolved`` record (or one ``section`` of it) in results.json, the run's own
    record of its recipe, by text."""
    def damage(run: Path) -> None:
        results = json.loads((run / "results.json").read_text())
        if section is None:
            results["recipe"]["resolved"] = "simclr"
        else:
            results["recipe"]["resolved"][section] = "simclr"
        (run / "results.json").write_text(json.dumps(results))
    return damage


@pytest.mark.parametrize("extra,named,before", [
    (["--overwrite", "method.name=lg", "method.global_layers=[nonexistent]"], "method.global_layers", None),
    (["--overwrite", f"run.min_free_mb={2**40}"], "run.min_free_mb", None),
    (["--resume", "rounds=1"], "rounds=2", None),  # below the 2 rounds completed
    (["--resume", "rounds=3"], "last.pt", _damage_checkpoints),  # no intact checkpoint
    (["--resume"], "last.pt", _damage_checkpoints),  # finished, but its checkpoints damaged since
    (["--resume", "rounds=3", "partition.alpha=5"], "partition", None),  # another experiment
    (["--resume"], "damaged 'resolved' record (it is a str", _damage_record(None)),
    (["--resume", "rounds=3", "local.lr=0.5"], "differs from '{run}/results.json' in local.lr",  # recipe.yaml's
     lambda run: (run / "recipe.yaml").unlink()),  # fix for a damaged copy: results.json still guards the run
    (["--resume", "rounds=3"], "recipe.yaml is gone and '{run}/results.json' holds no readable recipe",
     lambda run: ((run / "recipe.yaml").unlink(), (run / "results.json").write_text("{"))),
    (["--resume", "rounds=3"], "damaged 'resolved' record (its method is a str", _damage_record("method")),
    (["--overwrite"], f"{rundir.REPLACED}'", lambda run: (run / rundir.REPLACED).write_text("stray")),
    (["--overwrite"], f"{rundir.MOVING}'", lambda run: (run / rundir.MOVING).write_text("stray")),
], ids=["overwrite-bad-method-option", "overwrite-too-little-disk", "resume-fewer-rounds",
        "resume-damaged-checkpoints", "resume-finished-damaged-checkpoints", "resume-other-experiment",
        "resume-record-as-text", "resume-record-section-as-text", "resume-no-recipe-copy", "resume-no-record",
        "overwrite-stray-replaced-file",
        "overwrite-stray-partial-file"])
def test_a_refused_command_leaves_the_run_folder_byte_identical(used, capsys, extra, named, before) -> None:
    args, run = used
    if before is not None:
        before(run)
    kept = snapshot(run)
    refused([*args, *extra], capsys, named.format(run=run))
    assert snapshot(run) == kept


def _runs(folder: Path, finished: Path) -> None:
    """``folder`` as ``runs/`` is after two runs (``run.dir=runs``, or ``name=''`` before it was refused)."""
    for name in ("a", "b"):
        shutil.copytree(finished, folder / name)


def _sweep(folder: Path, finished: Path) -> None:
    """``folder`` as a sweep's ``--out`` is: its manifest, and a finished task's run two levels down."""
    shutil.copytree(finished, folder / "runs" / "alpha=0.1_seed=0")
    (folder / "manifest.json").write_text('{"format": 2, "tasks": []}')


def _repository(folder: Path, finished: Path) -> None:
    """``folder`` as the working folder is (``name=..``: runs/..): a repository, and runs/ in it."""
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    _runs(folder / "runs", finished)


@pytest.mark.parametrize("layout,named", [(_runs, "another run ('{folder}/a/results.json')"),
                                          (_sweep, "a sweep ('{folder}/manifest.json')"),
                                          (_repository, "a git repository ('{folder}/.git')")],
                         ids=["runs", "sweep", "repository"])
def test_overwrite_of_a_folder_of_runs_is_refused_and_every_run_survives(used, finished, capsys, layout,
                                                                         named) -> None:
    """--overwrite replaces one run: a folder holding other runs, a sweep or a repository is refused,
    by the CLI's check and by the claim itself, before anything is moved."""
    args, run = used
    folder = run.parent / "many"
    layout(folder, finished)
    kept = snapshot(folder)
    line = refused([*args, f"run.dir={folder}", "--overwrite"], capsys, named.format(folder=folder))
    assert "set run.dir to the folder of the one run" in line
    with pytest.raises(UserError, match="which replacing the run there would delete"):
        claim_run_dir(folder, {}, resume=False, overwrite=True)
    assert snapshot(folder) == kept


def _deep_sweep(folder: Path, finished: Path) -> None:
    """A sweep four folders below (``P/2026/12/07/sweep``): the old search stopped at three."""
    _sweep(folder / "2026/12/07/sweep", finished)


def _deep_run(folder: Path, finished: Path) -> None:
    """A run seven folders below, with no sweep around it."""
    shutil.copytree(finished, folder / "a/b/c/d/e/f/run")


@pytest.mark.parametrize("layout,named", [(_deep_sweep, "a sweep ('{folder}/2026/12/07/sweep/manifest.json')"),
                                          (_deep_run, "another run ('{folder}/a/b/c/d/e/f/run/results.json')")],
                         ids=["sweep-four-down", "run-seven-down"])
def test_overwrite_finds_a_run_or_a_sweep_at_any_depth(finished, tmp_path: Path, layout, named) -> None:
    """It deleted a finished sweep four folders below the run folder (three down was refused)."""
    folder = tmp_path / "P"
    layout(folder, finished)
    kept = snapshot(folder)
    for check in (rundir.check_run_dir, claim_run_dir):  # fit's look before torch loads, and its claim
        with pytest.raises(UserError, match="which replacing the run there would delete") as refusal:
            check(folder, {}, resume=False, overwrite=True)
        assert named.format(folder=folder) in str(refusal.value)
    assert snapshot(folder) == kept


def test_overwrite_refuses_a_folder_below_that_it_cannot_read(finished, tmp_path: Path, monkeypatch) -> None:
    """A folder it cannot list may hold a run: refused, naming it (it was taken for an empty one). Simulated:
    the tests run as root, who reads any folder."""
    folder = tmp_path / "P"
    shutil.copytree(finished, folder / "old/run")
    shut = folder / "old"
    scandir = os.scandir

    def no_permission(path=".", *rest):
        if Path(path) == shut:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path, *rest)

    monkeypatch.setattr(os, "scandir", no_permission)
    kept = snapshot(folder)
    with pytest.raises(UserError, match=f"cannot read to rule out another run \\('{shut}': Permission denied"):
        claim_run_dir(folder, {}, resume=False, overwrite=True)
    assert snapshot(folder) == kept


def test_resume_compares_with_the_runs_own_record_not_a_rewritten_recipe_yaml(used, capsys) -> None:
    """recipe.yaml is a copy anyone can rewrite (fit --write-recipe, an editor): rewritten with another
    temperature and no resolved record, a --resume at that temperature trained round 3 with it. The run's
    results.json records what trained."""
    args, run = used
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    saved["method"]["temperature"] = 0.7  # as --write-recipe writes it: the recipe, no resolved record
    del saved["resolved"]
    (run / "recipe.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    kept = snapshot(run)
    line = refused([*args, "--resume", "rounds=3", "method.temperature=0.7"], capsys, "method.temperature")
    assert f"'{run / 'results.json'}'" in line and "method.temperature=0.5" in line, line
    assert snapshot(run) == kept


def test_a_write_probe_a_kill_left_does_not_make_a_folder_used(tmp_path: Path) -> None:
    """A kill between writing and deleting the write probe leaves it: the folder still takes a fresh run."""
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.WRITE_PROBE).write_bytes(b"x" * 4096)
    claim_run_dir(run, {}, resume=False, overwrite=False).release()


def test_the_temporary_files_killed_writes_left_go_when_the_folder_is_claimed(tmp_path: Path) -> None:
    """Each atomic write has a temporary file of its own name: a kill can leave one each time. A start removes
    them (its lock held, so none is a live write's)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    left = [run / ".results.json.0123abcd.tmp", run / "checkpoints/.last.pt.sha256.89abcdef.tmp"]
    for path in left:
        path.write_text("{")
    claim_run_dir(run, {}, resume=False, overwrite=True).release()  # no new run saved: the old one comes back
    assert (run / "checkpoints").is_dir() and not any(path.exists() for path in left)
    from fedlight.atomic_files import LEFTOVER

    assert not any(LEFTOVER.fullmatch(name) for name in (".last.pt.tmp", "notes.0123abcd.tmp", ".x.0123abcd.tmp~"))


def test_a_second_run_into_a_held_folder_is_refused_naming_the_pid(used, capsys) -> None:
    args, run = used
    kept = snapshot(run)
    held = claim_run_dir(run, {}, resume=False, overwrite=True)  # as a live run replacing it holds it
    try:
        during = snapshot(run)
        for flag in ("--overwrite", "--resume"):
            refused([*args, flag], capsys, f"PID {os.getpid()}")
            assert snapshot(run) == during
    finally:
        held.release()
    assert snapshot(run) == kept  # it saved nothing: the run it was replacing is back


def test_a_live_run_keeps_its_folder_from_overwrite_and_a_second_resume(tmp_path: Path, tiny_recipe: Path,
                                                                       capsys) -> None:
    """The issue's case, with a real second process: a running ``fedlight fit``, then ``--overwrite``
    and ``--resume`` into its folder."""
    run = tmp_path / "live"
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe), "rounds=100", *FAST,
           f"run.dir={run}"]
    live = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600  # imports alone take minutes on a loaded machine
        while time.time() < deadline and live.poll() is None and not (run / "checkpoints/last.pt").exists():
            time.sleep(0.1)
        assert live.poll() is None and (run / "checkpoints/last.pt").exists()
        for flag in ("--overwrite", "--resume"):
            refused(["fit", "--recipe", str(tiny_recipe), "rounds=100", *FAST, f"run.dir={run}", flag], capsys,
                    f"PID {live.pid}")
        assert live.poll() is None  # still running, in its folder
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()
    rundir.FolderLock.acquire(run / rundir.LOCK, run).release()  # the kernel let go of the dead run's lock


def test_overwrite_keeps_its_hands_off_a_folder_below_that_a_live_run_holds(used, capsys) -> None:
    """A run (a sweep's task, say) that holds a folder inside the one ``--overwrite`` replaces: refused
    naming that folder, and both left as they were; today's claim would have moved it aside."""
    args, run = used
    live = claim_run_dir(run / "runs" / "alpha-1", {}, resume=False, overwrite=False)  # as a live task holds it
    try:
        kept = snapshot(run)
        refused([*args, "--overwrite"], capsys, f"'{run / 'runs' / 'alpha-1'}' is in use by another fedlight run "
                                               f"(PID {os.getpid()})")
        assert snapshot(run) == kept
    finally:
        live.release()


def test_a_run_that_ends_leaves_a_folder_below_that_a_live_run_holds(used, capsys) -> None:
    """An ``--overwrite`` that saved nothing puts the old run back by deleting what the folder holds
    now: a run started in a sub-folder meanwhile is kept, with one warning, until the next claim."""
    args, run = used
    old = snapshot(run)
    replacing = claim_run_dir(run, {}, resume=False, overwrite=True)
    live = claim_run_dir(run / "sub", {}, resume=False, overwrite=False)
    try:
        (run / "sub" / "results.json").write_text("{}")
        capsys.readouterr()
        replacing.release()
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("fedlight: warning: ") and f"'{run / 'sub'}'" in err, err
        assert (run / "sub" / "results.json").is_file() and (run / rundir.REPLACED).is_dir()
        refused([*args, "--resume"], capsys, f"'{run / 'sub'}' is in use")
    finally:
        live.release()
    claim_run_dir(run, {}, resume=False, overwrite=True).release()  # nothing held: the old run comes back
    assert snapshot(run) == old


def test_a_held_folder_stops_every_rank_of_a_two_process_run(used) -> None:
    """Rank 0 owns the folder: refused there, it ends the rank it started instead of leaving it waiting."""
    args, run = used
    held = claim_run_dir(run, {}, resume=False, overwrite=True)
    try:
        env = {k: v for k, v in os.environ.items() if k not in launch.EXTERNAL_LAUNCH}
        proc = subprocess.run([sys.executable, "-m", "fedlight", *args, "--overwrite", "fabric.devices=2",
                               "fabric.threads=1"], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                              text=True, timeout=300)
    finally:
        held.release()
    assert proc.returncode == 2, proc.stderr[-2000:]
    # rank 1 may have said "Initializing distributed" (Lightning) before it was ended: only errors are counted
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fedlight: error:")]
    assert len(errors) == 1 and f"PID {os.getpid()}" in errors[0], proc.stderr[-2000:]


def test_overwrite_puts_the_old_run_back_when_the_new_one_stops_before_saving(used, capsys) -> None:
    args, run = used
    kept = snapshot(run)
    refused([*args, "--overwrite", *ALL_DIVERGE], capsys, "faults.max_bad_clients=0", alone=False)
    assert snapshot(run) == kept


def test_overwrite_deletes_the_old_run_once_the_new_one_has_finished(used, monkeypatch) -> None:
    from fedlight.engine.loop import run_checkpoint

    args, run = used
    aside = []
    real_save = run_checkpoint.save_checkpoint

    def save(path: Path, obj: dict) -> None:
        aside.append((run / rundir.REPLACED).is_dir())
        real_save(path, obj)

    monkeypatch.setattr(run_checkpoint, "save_checkpoint", save)
    assert main([*args, "--overwrite", "rounds=2"]) == 0
    assert aside == [True, True]  # kept through every checkpoint, deleted once the run finished
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "comm.csv", "faults.csv", "partition.json",
                                                    "recipe.yaml", "results.json", "tensorboard"]
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 2


KILL_AT_SECOND_SAVE = """
import os, signal, sys
from fedlight.engine.loop import run_checkpoint
from fedlight.cli import main
real, calls = run_checkpoint.save_checkpoint, []
def save(path, obj):
    calls.append(1)
    if len(calls) == 2:  # round 1 of the new run is saved, round 2 is not
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, obj)
run_checkpoint.save_checkpoint = save
sys.exit(main(sys.argv[1:]))
"""


def test_a_kill_mid_run_of_an_overwrite_keeps_the_old_finished_run_until_the_new_one_finishes(used, capsys) -> None:
    args, run = used
    kept = snapshot(run)
    script = run.parent / "kill_at_second_save.py"
    script.write_text(KILL_AT_SECOND_SAVE)
    proc = cli_process.run_python([str(script), *args, "--overwrite", "rounds=3"],
                                  env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert snapshot(run / rundir.REPLACED) == kept  # the old run, byte for byte, aside
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 1  # the new one, unfinished
    err = refused(args, capsys, rundir.REPLACED)  # a plain fit says where the old run is and how to get it back
    assert "move" in err and snapshot(run / rundir.REPLACED) == kept
    again = run.parent / "again"
    shutil.copytree(run, again)
    claim_run_dir(again, {}, resume=False, overwrite=True).release()  # a second --overwrite, stopped at once
    assert snapshot(again) == kept  # the unfinished new run went, the old one came back
    assert main([*args, "--resume", "rounds=3"]) == 0  # the new run finishes: only then the old one goes
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 3
    assert not (run / rundir.REPLACED).exists()


def _die_holding(folder: rundir.RunFolder) -> None:
    """What a kill does to a run's hold on its folder: the kernel closes the lock, nothing else happens."""
    os.close(folder._lock.fd)


def test_a_kill_before_the_first_checkpoint_of_an_overwrite_gives_the_old_run_back(used, capsys) -> None:
    args, run = used
    kept = snapshot(run)
    killed = claim_run_dir(run, {}, resume=False, overwrite=True)
    (run / "recipe.yaml").write_text("the new run's recipe\n")
    (run / "tensorboard").mkdir()
    _die_holding(killed)
    refused(args, capsys, "--resume")  # the next fit into the folder puts the old run back first
    assert snapshot(run) == kept


def test_resume_after_a_kill_before_the_first_checkpoint_starts_from_round_0(tmp_path: Path, tiny_recipe: Path,
                                                                            capsys) -> None:
    run = tmp_path / "killed"
    args = ["fit", "--recipe", str(tiny_recipe), "rounds=1", *FAST, f"run.dir={run}"]
    killed = claim_run_dir(run, {}, resume=False, overwrite=False)  # as fit leaves it before round 1 ends
    write_yaml(run / "recipe.yaml", asdict(load_recipe(tiny_recipe, args[3:])))
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "events.out.tfevents.killed").write_bytes(b"half a round")
    _die_holding(killed)
    err = refused(args, capsys, "--resume")  # without it: the folder is used, and the message says what to do
    assert "not empty" in err
    assert main([*args, "--resume"]) == 0
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 1
    assert not (run / "tensorboard" / "events.out.tfevents.killed").exists()
    assert not (run / rundir.REPLACED).exists() and not (run / rundir.LOCK).exists()


def test_resume_after_a_stop_in_round_1_starts_from_round_0(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    """faults.max_bad_clients stops round 1: no checkpoint, and the message's --resume works."""
    run = tmp_path / "stopped"
    args = ["fit", "--recipe", str(tiny_recipe), "rounds=1", *FAST, f"run.dir={run}"]
    err = refused([*args, *ALL_DIVERGE], capsys, "--resume", alone=False)
    assert "round 1:" in err and not (run / "checkpoints").exists()
    assert main([*args, "faults.diverge=1", "faults.max_bad_clients=2", "--resume"]) == 0  # as the message says
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 1


def test_a_moved_run_folder_resumes(used, tmp_path: Path) -> None:
    args, run = used
    moved = tmp_path / "elsewhere" / "run"
    moved.parent.mkdir()
    run.rename(moved)
    assert main([*args, "--resume", "rounds=3", f"run.dir={moved}"]) == 0
    results = json.loads((moved / "results.json").read_text())
    assert results["rounds_completed"] == 3 and results["recipe"]["run"]["dir"] == str(moved)
    assert load_recipe(moved / "recipe.yaml").run.dir == str(moved)


def test_resume_into_an_empty_folder_is_refused_and_leaves_nothing(tmp_path: Path, tiny_recipe: Path,
                                                                   capsys) -> None:
    run = tmp_path / "never" / "run"
    refused(["fit", "--recipe", str(tiny_recipe), f"run.dir={run}", "--resume"], capsys, "no checkpoint")
    assert not (tmp_path / "never").exists()


def test_report_skips_a_run_kept_aside(tmp_path: Path, finished: Path) -> None:
    from fedlight.report.runs import find_runs

    sweep = tmp_path / "sweep"
    shutil.copytree(finished, sweep / "runs/0000")
    shutil.copytree(finished, sweep / "runs/0001" / rundir.REPLACED)  # 0001 is being replaced
    assert [r.path.name for r in find_runs([sweep])] == ["0000"]


def test_a_run_saved_before_a_new_option_existed_resumes(used) -> None:
    """A recipe.yaml written by an older fedlight lacks the keys added since; their defaults keep
    the old behaviour, so the folder is the same experiment (and a real change is named by key)."""
    args, run = used
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    del saved["local"]["schedule"]  # an option added after the run was written
    (run / "recipe.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    results = json.loads((run / "results.json").read_text())
    del results["recipe"]["local"]["schedule"]  # and the record results.json keeps, which --resume compares
    (run / "results.json").write_text(json.dumps(results))
    assert main([*args, "--resume", "rounds=3"]) == 0
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 3


def test_resume_names_the_key_that_differs(used, capsys) -> None:
    args, run = used
    assert main([*args, "--resume", "local.lr=0.5"]) == 2
    assert "in local.lr;" in capsys.readouterr().err


@pytest.mark.parametrize("changed,named", [
    (["faults.attack=sign_flip", "faults.attackers=0.5"], "in faults.attack, faults.attackers;"),
    (["faults.attack=labels", "faults.attackers=0.5"], "in faults.attack, faults.attackers;"),
    (["faults.dropout=0.5"], "in faults.dropout;"),
], ids=["attack", "label-flipping", "dropout"])
def test_resume_refuses_a_changed_attack_or_fault(used, capsys, changed, named) -> None:
    """What a round computes is the experiment: a resumed run would mix two of them under one record."""
    args, run = used
    kept = snapshot(run)
    refused([*args, "--resume", "rounds=3", *changed], capsys, named)
    assert snapshot(run) == kept


@pytest.mark.parametrize("gone", ["deleted", "a-directory", "recipe-too"])
def test_resume_of_a_run_without_its_checkpoint_is_refused_not_trained_again(used, capsys, gone: str) -> None:
    """results.json says rounds are done: the run had saved, so a missing last.pt is damage, not a
    run killed before its first checkpoint (which starts again from round 0). What the sweep's
    executors and slurm/multinode.sbatch pass for a run whose checkpoints were pruned."""
    args, run = used
    for name in ("last.pt", "last.pt.prev"):
        (run / "checkpoints" / name).unlink()
    if gone == "a-directory":
        (run / "checkpoints/last.pt").mkdir()
    if gone == "recipe-too":  # recipe.yaml too: results.json still says a round was saved
        (run / "recipe.yaml").unlink()
    kept = snapshot(run)
    err = refused([*args, "--resume"], capsys, "last.pt")
    assert "results.json" in err and "finished after 2 rounds" in err and "--overwrite" in err, err
    assert snapshot(run) == kept and (run / "checkpoints/last.pt").is_dir() == (gone == "a-directory")


def test_resume_of_a_finished_run_notices_a_damaged_checkpoint_and_trains_its_last_round_again(used, capsys) -> None:
    args, run = used
    last = run / "checkpoints/last.pt"
    model = torch.load(last, weights_only=True)["global"]
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 1
    last.write_bytes(bytes(data))
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"checkpoint '{last}' fails its sha256 check" in err and "nothing to resume" not in err, err
    again = torch.load(last, weights_only=True)["global"]
    assert all(torch.equal(model[k], again[k]) for k in model)  # round 2 trained again from round 1's


def test_resume_of_a_finished_run_changes_nothing(used, capsys) -> None:
    args, run = used
    kept = snapshot(run)
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    captured = capsys.readouterr()
    assert "nothing to resume" in captured.err and "final:" in captured.out, captured
    assert snapshot(run) == kept  # no second projector, final/* or results.json
    assert main([*args, "--resume", "rounds=3"]) == 0  # more rounds: it trains them
    assert json.loads((run / "results.json").read_text())["rounds_completed"] == 3
