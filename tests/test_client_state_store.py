"""The disk-backed client-state store, incremental checkpoints committed by a manifest."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import cli_process
from conftest import fit_killed_after
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop.client_store import choose_store
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.run.fit import fit
from fedlight.engine.state import client_state_files as files
from fedlight.engine.state.disk_store import DiskClientStateStore

REPO = Path(__file__).resolve().parents[1]
# runs whose point is where client states are kept and how a run resumes: 400 samples, short probe
FAST = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0", "clients.num=3", "clients.fraction=0.67",
        "data.subset=400"]
METHODS = {
    "scaffold": ["method={name: scaffold, objective: supervised}", "server.name=scaffold", "views.blur_p=[0.0]",
                 "model.backbone=tiny_cnn"],
    "moon": ["method={name: moon, mu: 5.0}", "model.backbone=moon_cnn", "views.blur_p=[0.0]"],
}
SCAFFOLD = [*METHODS["scaffold"], *FAST]


def _strip(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in history]


def _ckpt(run: Path) -> dict:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)


def _disk_states(run: Path) -> dict[int, dict[str, torch.Tensor]]:
    """Every client's state as the disk store's last checkpoint commits it."""
    folder = run / "checkpoints" / files.FOLDER
    return {c: torch.load(folder / files.file_name(c, v, d), weights_only=True)
            for c, (v, d) in files.recorded(_ckpt(run), folder).items()}


def _same_states(a: dict[int, dict], b: dict[int, dict]) -> bool:
    return sorted(a) == sorted(b) and all(sorted(a[c]) == sorted(b[c]) and all(torch.equal(a[c][k], b[c][k])
                                                                              for k in a[c]) for c in a)


def _same_run(a: dict, b: dict, run_a: Path, run_b: Path) -> None:
    assert _strip(a["history"]) == _strip(b["history"]) and a["final"] == b["final"]
    ga, gb = _ckpt(run_a)["global"], _ckpt(run_b)["global"]
    assert sorted(ga) == sorted(gb) and all(torch.equal(ga[k], gb[k]) for k in ga)


@pytest.fixture(scope="module")
def scaffold_runs(tmp_path_factory) -> tuple[Path, dict[int, tuple[dict, Path]]]:
    """(the tiny recipe, {rounds: (result, run folder)}): SCAFFOLD disk-store runs of 2, 3 and 4
    rounds without a stop, made once: the straight runs the resume tests end at and the folders
    they copy, never changed. In the 3-round run client 0 skipped round 3: rounds 1-3 train
    clients [0, 2], [0, 2], [1, 2]."""
    from conftest import TINY

    tmp = tmp_path_factory.mktemp("scaffold")
    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    runs = {rounds: (fit(load_recipe(recipe, [*SCAFFOLD, f"rounds={rounds}", "run.client_state=disk",
                                              f"run.dir={tmp / str(rounds)}"])), tmp / str(rounds))
            for rounds in (2, 3, 4)}
    assert [row["clients"] for row in runs[3][0]["history"]] == [[0, 2], [0, 2], [1, 2]]
    return recipe, runs


@pytest.mark.parametrize("method", sorted(METHODS))
def test_disk_store_equals_memory_store_bit_for_bit_and_resumes_bit_for_bit(tmp_path: Path, tiny_recipe: Path,
                                                                          method: str, request) -> None:
    args = [*METHODS[method], *FAST, "rounds=3"]
    memory = fit(load_recipe(tiny_recipe, [*args, "run.client_state=memory", f"run.dir={tmp_path / 'mem'}"]))
    if method == "scaffold":  # the module's straight disk-store runs are of this recipe
        recipe, runs = request.getfixturevalue("scaffold_runs")
        (disk, disk_dir), half = runs[3], runs[2][1]
    else:
        recipe, disk_dir, half = tiny_recipe, tmp_path / "disk", tmp_path / "half"
        disk = fit(load_recipe(recipe, [*args, "run.client_state=disk", f"run.dir={disk_dir}"]))
        fit(load_recipe(recipe, [*METHODS[method], *FAST, "rounds=2", "run.client_state=disk", f"run.dir={half}"]))
    _same_run(memory, disk, tmp_path / "mem", disk_dir)
    held = _ckpt(tmp_path / "mem")["clients"]
    assert held and _same_states(held, _disk_states(disk_dir))
    ckpt = _ckpt(disk_dir)
    assert ckpt["clients"] == {} and sorted(ckpt[files.MANIFEST]) == sorted(held)  # every client holding state
    shutil.copytree(half, tmp_path / "resumed")  # stopped after round 2
    resumed = fit(load_recipe(recipe, [*args, "run.client_state=disk", f"run.dir={tmp_path / 'resumed'}"]),
                  resume=True)
    _same_run(disk, resumed, disk_dir, tmp_path / "resumed")


def test_a_run_resumes_across_stores_both_ways(tmp_path: Path, tiny_recipe: Path, scaffold_runs) -> None:
    """A run folder with a monolithic last.pt (the memory store, or a fedlight before the disk
    store) resumes with the disk store, and a disk run resumes with the memory store."""
    straight, straight_dir = scaffold_runs[1][4]  # a disk-store run: the stores are equal bit for bit (above)
    run = tmp_path / "run"
    for rounds, store in [(2, "memory"), (3, "disk"), (4, "memory")]:
        result = fit(load_recipe(tiny_recipe, [*SCAFFOLD, f"rounds={rounds}", f"run.client_state={store}",
                                               f"run.dir={run}"]), resume=rounds > 2)
    _same_run(straight, result, straight_dir, run)
    assert _same_states(_ckpt(run)["clients"], _disk_states(straight_dir))


KILL_AT_THIRD_SAVE = """
import os, signal, sys
from fedlight.engine.loop import run_checkpoint
from fedlight.cli import main
real, calls = run_checkpoint.save_checkpoint, []
def save(path, obj):  # round 3's client files are written and synced; its manifest is not
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    real(path, obj)
run_checkpoint.save_checkpoint = save
sys.exit(main(sys.argv[1:]))
"""


def test_a_kill_9_between_the_client_files_and_the_manifest_leaves_a_resumable_run(tmp_path: Path, tiny_recipe: Path,
                                                                                  scaffold_runs) -> None:
    args = [*SCAFFOLD, "rounds=4", "run.client_state=disk"]
    run = tmp_path / "killed"
    script = tmp_path / "kill_at_third_save.py"
    script.write_text(KILL_AT_THIRD_SAVE)
    proc = cli_process.run_python([str(script), "fit", "--recipe", str(tiny_recipe), *args, f"run.dir={run}"],
                                  env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert _ckpt(run)["rounds_completed"] == 2
    written = [n for n in os.listdir(run / "checkpoints/clients") if "-r3-" in n]
    assert written  # the uncommitted round's files are on disk
    resumed = fit(load_recipe(tiny_recipe, [*args, f"run.dir={run}"]), resume=True)
    straight, straight_dir = scaffold_runs[1][4]
    _same_run(straight, resumed, straight_dir, run)
    assert _same_states(_disk_states(run), _disk_states(straight_dir))


def test_checkpoint_every_two_rounds_killed_between_resumes_from_the_earlier_and_ends_bit_for_bit(
        tmp_path: Path, tiny_recipe: Path, scaffold_runs) -> None:
    """run.checkpoint_every=2: rounds 2 and 4 are saved; a kill -9 after round 3 resumes from round 2, trains round
    3 again (its files of the killed try are dropped) and ends where a straight run saving every round ends."""
    args = [*SCAFFOLD, "rounds=4", "run.client_state=disk", "run.checkpoint_every=2"]
    run = tmp_path / "killed"
    fit_killed_after(3, tmp_path, ["--recipe", str(tiny_recipe), *args, f"run.dir={run}"])
    assert _ckpt(run)["rounds_completed"] == 2
    assert not (run / "checkpoints/last.pt.prev").exists()  # round 1 wrote no checkpoint: round 2's is the first
    resumed = fit(load_recipe(tiny_recipe, [*args, f"run.dir={run}"]), resume=True)
    straight, straight_dir = scaffold_runs[1][4]
    _same_run(straight, resumed, straight_dir, run)
    assert _same_states(_disk_states(run), _disk_states(straight_dir))
    assert _ckpt(run)["rounds_completed"] == 4


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_file_of_the_last_round_falls_back_to_the_previous_checkpoint(tmp_path: Path, scaffold_runs,
                                                                               capsys, damage: str) -> None:
    recipe, runs = scaffold_runs
    run = tmp_path / "run"
    shutil.copytree(runs[2][1], run)  # stopped after round 2
    client, (version, digest) = [(c, e) for c, e in sorted(_ckpt(run)[files.MANIFEST].items()) if e[0] == 2][0]
    path = run / "checkpoints/clients" / files.file_name(client, version, digest)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:  # one flipped bit in the tensor data still loads: only the digest sees it
        data[-100] ^= 0x01
    path.write_bytes(bytes(data))
    capsys.readouterr()
    args = [*SCAFFOLD, "rounds=3", "run.client_state=disk"]
    resumed = fit(load_recipe(recipe, [*args, f"run.dir={run}"]), resume=True)
    err = capsys.readouterr().err
    assert "last.pt.prev" in err and path.name in err, err
    straight, straight_dir = runs[3]
    _same_run(straight, resumed, straight_dir, run)


def test_a_damaged_file_every_checkpoint_needs_is_one_line_naming_it_and_nothing_is_written(
        scaffold_run, tmp_path: Path, capsys) -> None:
    """Rounds 1-3 train clients [0, 2], [0, 2], [1, 2]: client 0's round-2 file is what last.pt
    (round 3) and last.pt.prev (round 2) both commit."""
    recipe, run, _ = _copy(scaffold_run, tmp_path)
    version, digest = _ckpt(run)[files.MANIFEST][0]
    assert version == 2
    path = run / "checkpoints/clients" / files.file_name(0, version, digest)
    path.write_bytes(path.read_bytes()[:100])
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    capsys.readouterr()
    code = main(["fit", "--recipe", str(recipe), "--resume", *SCAFFOLD, "rounds=4", "run.client_state=disk",
                 f"run.dir={run}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fedlight: error: ") and str(path) in err, err
    assert "sha256" in err and "--overwrite" in err
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before


def test_the_cache_stays_within_its_bound_and_evicted_states_come_back_from_disk(tmp_path: Path) -> None:
    store = DiskClientStateStore(tmp_path, cache_mb=1, owns=lambda c: True)
    states = {c: {"w": torch.full((100_000,), float(c))} for c in range(5)}  # 400 KB each: 2 fit in 1 MiB
    for c, state in states.items():
        store.put(c, state)
    assert list(store._cache) == [3, 4] and store._cached_bytes == 800_000
    assert all(torch.equal(store.get(c)["w"], states[c]["w"]) for c in range(5))
    assert 0 in store and 7 not in store and store.get(7) is None
    assert store.written_bytes > 5 * 400_000 and len(os.listdir(tmp_path)) == 5


def test_a_round_checkpoint_records_every_clients_file_and_old_versions_are_pruned(tmp_path: Path) -> None:
    fabric = SimpleNamespace(world_size=1)  # one process: the gather is the identity
    store = DiskClientStateStore(tmp_path, cache_mb=1, owns=lambda c: True)
    for round_ in range(1, 6):  # client 0 changes every round, client 1 only in round 1
        store.put(0, {"w": torch.tensor([float(round_)])})
        if round_ == 1:
            store.put(1, {"w": torch.tensor([-1.0])})
        _, entries = store.commit(fabric, round_)
        record = entries[files.MANIFEST]
        assert sorted(record) == [0, 1] and record[0][0] == round_ and record[1][0] == 1
        assert all((tmp_path / files.file_name(c, v, d)).is_file() for c, (v, d) in record.items())
    # after round 5's commit: last.pt (5) and .prev (4) need client 0's r5 and r4 (r3 goes at the
    # next commit), and client 1's only file
    assert sorted(store.files.versions[0]) == [3, 4, 5] and sorted(store.files.versions[1]) == [1]


def test_auto_keeps_memory_while_every_state_fits_the_cache() -> None:
    assert choose_store("auto", 0, 10_000, 1) == "memory"  # stateless
    assert choose_store("auto", 400_000, 100, 256) == "memory"
    assert choose_store("auto", 400_000, 10_000, 256) == "disk"
    assert choose_store("memory", 400_000, 10_000, 256) == "memory" and choose_store("disk", 0, 2, 256) == "disk"


@pytest.mark.parametrize("override, key", [("run.client_state=files", "run.client_state"),
                                           ("run.state_cache_mb=0", "run.state_cache_mb"),
                                           ("run.checkpoint_every=0", "run.checkpoint_every")])
def test_bad_store_options_are_one_line_naming_the_key(tmp_path: Path, tiny_recipe: Path, capsys, override: str,
                                                       key: str) -> None:
    code = main(["fit", "--recipe", str(tiny_recipe), override, f"run.dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and key in err and not (tmp_path / "r").exists(), err


def test_two_processes_keep_each_clients_state_on_its_own_rank(tmp_path: Path, tiny_recipe: Path) -> None:
    """With 2 ranks each writes only its own clients' files (client % 2) and nothing gathers the
    states; the run matches one process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [*SCAFFOLD, "clients.num=4", "clients.fraction=1.0", "run.client_state=disk", "fabric.threads=1"]
    for devices in (1, 2):
        cmd = ["fit", "--recipe", str(tiny_recipe), *args, f"fabric.devices={devices}",
               f"run.dir={tmp_path / str(devices)}"]
        proc = cli_process.run(cmd, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = _disk_states(tmp_path / "1"), _disk_states(tmp_path / "2")
    assert sorted(one) == sorted(two) == [0, 1, 2, 3]
    for c in one:
        assert all(torch.allclose(one[c][k], two[c][k], atol=1e-5, rtol=1e-4) for k in one[c]), c
    ckpt = _ckpt(tmp_path / "2")
    assert ckpt["clients"] == {} and sorted(ckpt[files.MANIFEST]) == [0, 1, 2, 3]


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def scaffold_run(scaffold_runs) -> tuple[Path, Path]:
    """(the tiny recipe, the finished 3-round SCAFFOLD disk-store run of ``scaffold_runs``)."""
    recipe, runs = scaffold_runs
    return recipe, runs[3][1]


def _copy(scaffold_run: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    recipe, finished = scaffold_run
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    return recipe, run, run / "checkpoints/clients"


def _state_file(run: Path, client: int, version: int) -> Path:
    (path,) = (run / "checkpoints/clients").glob(f"c{client}-r{version}-*.pt")
    return path


def _refused_resume(recipe: Path, run: Path, capsys) -> str:
    before = _snapshot(run)
    capsys.readouterr()
    code = main(["fit", "--recipe", str(recipe), "--resume", *SCAFFOLD, "rounds=4", "run.client_state=disk",
                 f"run.dir={run}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    assert _snapshot(run) == before
    return err


def test_a_missing_file_of_a_client_that_skipped_the_last_round_is_named_not_reset(scaffold_run, tmp_path: Path,
                                                                                  capsys) -> None:
    recipe, run, clients = _copy(scaffold_run, tmp_path)
    for older in clients.glob("c0-*"):  # client 0's files (its round-2 state and any older one)
        older.unlink()
    err = _refused_resume(recipe, run, capsys)
    assert _state_file(scaffold_run[1], 0, 2).name in err and "missing" in err, err


def test_another_clients_file_under_a_clients_name_is_not_loaded_as_its_state(scaffold_run, tmp_path: Path,
                                                                             capsys) -> None:
    """Client 0's files replaced by a copy of client 1's, named as client 0's of round 2 (the name
    an earlier fedlight inferred the state from, the digest in it the copy's own): the file the
    record names is missing. (Under the recorded name itself, its sha256 check fails.)"""
    recipe, run, clients = _copy(scaffold_run, tmp_path)
    own, other = _state_file(run, 0, 2), _state_file(run, 1, 3)
    for older in clients.glob("c0-*"):
        older.unlink()
    (clients / other.name.replace("c1-r3-", "c0-r2-")).write_bytes(other.read_bytes())
    err = _refused_resume(recipe, run, capsys)
    assert own.name in err and "missing" in err, err


def test_a_stray_file_of_a_client_that_does_not_exist_is_ignored(scaffold_run, scaffold_runs,
                                                               tmp_path: Path) -> None:
    recipe, run, clients = _copy(scaffold_run, tmp_path)
    stray = clients / files.file_name(99, 1, "0" * 64)
    stray.write_bytes(_state_file(run, 0, 2).read_bytes())
    args = [*SCAFFOLD, "rounds=4", "run.client_state=disk"]
    resumed = fit(load_recipe(recipe, [*args, f"run.dir={run}"]), resume=True)
    straight, straight_dir = scaffold_runs[1][4]
    _same_run(straight, resumed, straight_dir, run)
    states = _disk_states(run)
    assert _same_states(states, _disk_states(straight_dir)) and sorted(states) == [0, 1, 2]


def test_a_missing_client_state_folder_is_named_not_the_digest_listing(scaffold_run, tmp_path: Path, capsys) -> None:
    recipe, run, clients = _copy(scaffold_run, tmp_path)
    shutil.rmtree(clients)
    err = _refused_resume(recipe, run, capsys)
    assert f"'{clients}'" in err and "sha256" not in err, err


def test_an_earlier_fedlights_checkpoint_of_the_rounds_changes_only_resumes(scaffold_run, scaffold_runs,
                                                                           tmp_path: Path) -> None:
    """Checkpoints that list only their round's changed clients (``client_files``): the other
    clients' files are found by name once, and the run ends as a straight one."""
    from fedlight.engine.state.checkpoint import save_checkpoint

    recipe, run, _ = _copy(scaffold_run, tmp_path)
    saved = [torch.load(run / "checkpoints" / name, weights_only=True) for name in ("last.pt.prev", "last.pt")]
    for ckpt in saved:
        record = ckpt.pop(files.MANIFEST)
        ckpt[files.LEGACY_MANIFEST] = {c: e for c, e in record.items() if e[0] == ckpt["rounds_completed"]}
        save_checkpoint(run / "checkpoints/last.pt", ckpt)  # .prev first, then last.pt: each keeps its place
    assert sorted(_ckpt(run)[files.LEGACY_MANIFEST]) == [1, 2]
    args = [*SCAFFOLD, "rounds=4", "run.client_state=disk"]
    resumed = fit(load_recipe(recipe, [*args, f"run.dir={run}"]), resume=True)
    straight, straight_dir = scaffold_runs[1][4]
    _same_run(straight, resumed, straight_dir, run)
    assert sorted(_ckpt(run)[files.MANIFEST]) == [0, 1, 2]
