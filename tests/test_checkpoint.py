"""Crash-safe checkpoints: atomic rotation, sha256 check, fallback to the previous one, no code on load."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from conftest import QUICK_EVAL, SMALL_RUN
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.run.fit import fit
from fedlight.engine.state import checkpoint as ckpt_mod
from fedlight.engine.state.checkpoint import load_checkpoint, save_checkpoint
from fedlight.errors import UserError

# runs whose point is what a checkpoint holds and how a resume finds it: a small network on 400 samples
FAST = [*QUICK_EVAL, *SMALL_RUN]


def _ckpt(round_: int) -> dict:
    return {"rounds_completed": round_, "global": {"w": torch.full((64, 64), float(round_))}, "history": [round_]}


def _one_line_error(excinfo: pytest.ExceptionInfo, name: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and name in message
    return message


def test_digests_listed_in_sha256sum_format_and_previous_kept(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, _ckpt(1))
    save_checkpoint(path, _ckpt(2))
    assert load_checkpoint(path)["rounds_completed"] == 2
    prev = torch.load(tmp_path / "last.pt.prev", weights_only=True)
    assert prev["rounds_completed"] == 1
    check = subprocess.run(["sha256sum", "-c", "last.pt.sha256"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check.stdout
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_checkpoint_falls_back_to_previous(tmp_path: Path, damage: str, capsys) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, _ckpt(1))
    save_checkpoint(path, _ckpt(2))
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":  # a single flipped bit inside the tensor data still unpickles: only sha256 sees it
        data[len(data) // 2] ^= 0x01
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert load_checkpoint(path)["rounds_completed"] == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "last.pt" in err and "previous" in err
    save_checkpoint(path, _ckpt(2))  # the resumed round again: the intact round 1 it resumed from stays the .prev
    path.write_bytes(b"")  # so that a damage now still finds it
    assert load_checkpoint(path)["rounds_completed"] == 1


def test_flipped_bit_would_load_without_the_checksum(tmp_path: Path) -> None:
    """Why the sha256 is needed: torch.load accepts the damaged file and returns wrong numbers."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, _ckpt(2))
    data = bytearray(path.read_bytes())
    offset = data.find(torch.full((1,), 2.0).numpy().tobytes() * 8)  # inside the tensor's storage
    data[offset + 3] ^= 0x01
    path.write_bytes(bytes(data))
    raw = torch.load(path, weights_only=True)["global"]["w"]
    assert not torch.equal(raw, torch.full((64, 64), 2.0))
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path)
    assert "sha256" in _one_line_error(excinfo, "last.pt")


def test_both_damaged_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, _ckpt(1))
    save_checkpoint(path, _ckpt(2))
    for p in (path, tmp_path / "last.pt.prev"):
        p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path)
    message = _one_line_error(excinfo, str(path))
    assert "last.pt.prev" in message and "--overwrite" in message


def test_legacy_checkpoint_without_digests_is_checked_by_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    torch.save(_ckpt(4), path)
    assert load_checkpoint(path)["rounds_completed"] == 4
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path)
    assert "truncated" in _one_line_error(excinfo, "last.pt")


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_checkpoint_cannot_run_code(tmp_path: Path) -> None:
    path, marker = tmp_path / "last.pt", tmp_path / "pwned"
    torch.save({"rounds_completed": 1, "evil": _Payload(marker)}, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (tmp_path / "last.pt.sha256").write_text(f"{digest}  last.pt\n")  # even with a matching checksum
    with pytest.raises(UserError):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_crash_at_any_step_of_a_save_leaves_old_or_new(tmp_path: Path, monkeypatch) -> None:
    """Kill the save after each of its renames: the checkpoint that loads is round 1 or round 2."""
    real_replace = os.replace
    steps = 0
    while True:
        folder = tmp_path / f"crash{steps}"
        path = folder / "last.pt"
        save_checkpoint(path, _ckpt(0))
        save_checkpoint(path, _ckpt(1))
        calls = []

        def replace(src, dst, _calls=calls, _limit=steps):
            if len(_calls) == _limit:
                raise KeyboardInterrupt  # the process dies here
            _calls.append(dst)
            real_replace(src, dst)

        monkeypatch.setattr(ckpt_mod.os, "replace", replace)
        try:
            save_checkpoint(path, _ckpt(2))
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.setattr(ckpt_mod.os, "replace", real_replace)
        assert load_checkpoint(path)["rounds_completed"] in ((2,) if finished else (1, 2))
        if finished:
            break
        steps += 1
    assert steps >= 3  # digests, previous, checkpoint


def test_truncated_checkpoint_resumes_from_previous_and_ends_like_a_straight_run(tmp_path: Path, tiny_recipe: Path,
                                                                                capsys) -> None:
    straight = fit(load_recipe(tiny_recipe, ["rounds=2", *FAST, f"run.dir={tmp_path / 'a'}"]))
    fit(load_recipe(tiny_recipe, ["rounds=2", *FAST, f"run.dir={tmp_path / 'b'}"]))
    last = tmp_path / "b/checkpoints/last.pt"
    last.write_bytes(last.read_bytes()[:1000])  # round 2's: the resume starts from last.pt.prev, round 1's
    resumed = fit(load_recipe(tiny_recipe, ["rounds=2", *FAST, f"run.dir={tmp_path / 'b'}"]), resume=True)
    a = torch.load(tmp_path / "a/checkpoints/last.pt", weights_only=True)["global"]
    b = torch.load(last, weights_only=True)["global"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda h: [{k: v for k, v in row.items() if k not in TIMING} for row in h]  # noqa: E731
    assert strip(straight["history"]) == strip(resumed["history"])
    # both copies damaged: --resume ends in one line naming the file, exit code 2
    for p in (last, last.with_name("last.pt.prev")):
        p.write_bytes(b"\0" * 10)
    capsys.readouterr()
    code = main(["fit", "--recipe", str(tiny_recipe), "--resume", "rounds=4", *FAST, f"run.dir={tmp_path / 'b'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "last.pt" in err, err


# ---------------------------------------------------------------- files that load but hold the wrong thing

def _saved_twice(folder: Path) -> Path:
    path = folder / "last.pt"
    save_checkpoint(path, _ckpt(1))
    save_checkpoint(path, _ckpt(2))
    return path


@pytest.mark.parametrize("listing", [b"garbage\n", bytes(range(256)), b"", b"\n\n",
                                     b"0" * 64 + b"  other.pt\n",  # a listing of some other file
                                     b"0" * 63 + b"  last.pt\n"])
def test_a_damaged_digest_listing_is_named_not_the_intact_checkpoints(tmp_path: Path, listing: bytes) -> None:
    """Today a garbage last.pt.sha256 made both intact checkpoints 'fail their sha256 check' and
    advised --overwrite, which throws the run away."""
    path = _saved_twice(tmp_path)
    (tmp_path / "last.pt.sha256").write_bytes(listing)
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path)
    message = _one_line_error(excinfo, "last.pt.sha256")
    assert "delete it" in message and "--overwrite" not in message
    (tmp_path / "last.pt.sha256").unlink()  # the fix it gives: both checkpoints are intact
    assert load_checkpoint(path)["rounds_completed"] == 2


def test_a_listing_from_another_run_is_named_when_both_checkpoints_load(tmp_path: Path) -> None:
    path = _saved_twice(tmp_path)
    (tmp_path / "last.pt.sha256").write_text("".join(f"{'ab' * 32}  {n}\n" for n in ("last.pt.prev", "last.pt")))
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path)
    message = _one_line_error(excinfo, "last.pt.sha256")
    assert "--overwrite" not in message


@pytest.mark.parametrize("wrong", [{"weights": torch.ones(3)}, [1, 2], torch.ones(2), {"rounds_completed": "2"}])
def test_a_torch_file_that_is_not_a_checkpoint_is_one_line(tmp_path: Path, wrong) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, wrong)
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path)
    message = _one_line_error(excinfo, "last.pt")
    assert "run.dir" in message and "--overwrite" not in message


def test_a_checkpoint_the_caller_refuses_falls_back_to_the_previous(tmp_path: Path, capsys) -> None:
    path = _saved_twice(tmp_path)
    ckpt = load_checkpoint(path, check=lambda c: "a model of another method" if c["rounds_completed"] == 2 else None)
    assert ckpt["rounds_completed"] == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another method" in err and "last.pt.prev" in err
    with pytest.raises(UserError) as excinfo:
        load_checkpoint(path, check=lambda c: "a model of another method")
    assert "run.dir" in _one_line_error(excinfo, "last.pt.prev")


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory) -> dict[str, Path]:
    """A 1-round SimCLR and a 1-round BYOL run of the tiny recipe (a few seconds each)."""
    from conftest import REPO, TINY

    folder = tmp_path_factory.mktemp("runs")
    recipe = folder / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    runs = {}
    for method in ("simclr", "byol"):
        runs[method] = folder / method
        fit(load_recipe(recipe, ["rounds=1", *FAST, f"method.name={method}", f"run.dir={runs[method]}"]))
    return {"recipe": recipe, **runs}


def _wrong_content(kind: str, runs: dict[str, Path]) -> dict:
    mine = torch.load(runs["simclr"] / "checkpoints/last.pt", weights_only=True)
    if kind == "another method":
        return torch.load(runs["byol"] / "checkpoints/last.pt", weights_only=True)
    if kind == "no rounds_completed":
        return {k: v for k, v in mine.items() if k != "rounds_completed"}
    if kind == "no history":
        return {k: v for k, v in mine.items() if k != "history"}
    if kind == "history longer than its rounds":
        return {**mine, "history": mine["history"] * 2}
    if kind == "a client of another run":
        return {**mine, "clients": {7: {}}}
    if kind == "a global tensor of another shape":
        key = next(iter(mine["global"]))
        return {**mine, "global": {**mine["global"], key: torch.zeros(3)}}
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["another method", "no rounds_completed", "no history",
                                  "history longer than its rounds", "a client of another run",
                                  "a global tensor of another shape"])
def test_resuming_a_checkpoint_that_holds_the_wrong_thing(tmp_path: Path, finished_runs: dict[str, Path],
                                                          capsys, kind: str) -> None:
    """A valid, digest-matching torch file in the run folder that is not this run's checkpoint:
    --resume names it in one line with a fix that keeps the folder, and changes nothing."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished_runs["simclr"], run)
    saved = yaml.safe_load((run / "recipe.yaml").read_text())
    (run / "recipe.yaml").write_text(yaml.safe_dump({**saved, "run": {**saved["run"], "dir": str(run)}}, sort_keys=False))
    for name in ("last.pt", "last.pt.prev", "last.pt.sha256"):
        (run / "checkpoints" / name).unlink(missing_ok=True)
    save_checkpoint(run / "checkpoints/last.pt", _wrong_content(kind, finished_runs))
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    capsys.readouterr()
    code = main(["fit", "--recipe", str(finished_runs["recipe"]), "--resume", "rounds=2", *FAST,  # a round to train
                 f"run.dir={run}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    assert str(run / "checkpoints/last.pt") in err and "run.dir" in err and "--overwrite" not in err, err
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
