"""Resources: an unwritable or full run folder is refused before training; a disk that fills up
mid-run keeps the last good checkpoint; memory does not grow with the number of clients."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.run import run_folder as rundir
from fedlight.engine.run.fit import fit
from fedlight.engine.state import checkpoint as ckpt_mod
from fedlight.engine.state.checkpoint import load_checkpoint
from fedlight.errors import UserError

REPO = Path(__file__).resolve().parents[1]
FAST = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and "Traceback" not in err, err
    return err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_is_refused_before_training(tmp_path: Path, tiny_recipe: Path, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(["fit", "--recipe", str(tiny_recipe), f"run.dir={locked / 'run'}"]) == 2
    finally:
        locked.chmod(0o700)
    assert "not writable" in _one_line(capsys) and not (locked / "run").exists()


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_unwritable_folder_is_one_line_and_leaves_nothing(tmp_path: Path, tiny_recipe: Path, capsys, monkeypatch,
                                                          code: int) -> None:
    real = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name == ".write-test":  # the file system refuses the probe, as a read-only or full one does
            raise OSError(code, os.strerror(code))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    run = tmp_path / "deep" / "run"
    assert main(["fit", "--recipe", str(tiny_recipe), f"run.dir={run}"]) == 2
    err = _one_line(capsys)
    assert str(run) in err and os.strerror(code) in err and "run.dir" in err
    assert not run.exists()


def test_too_little_free_space_is_refused_before_anything_is_written(tmp_path: Path, tiny_recipe: Path, capsys,
                                                                     monkeypatch) -> None:
    real = rundir.shutil.disk_usage
    monkeypatch.setattr(rundir.shutil, "disk_usage", lambda p: real(p)._replace(free=10 * 2**20))
    run = tmp_path / "run"
    assert main(["fit", "--recipe", str(tiny_recipe), "run.min_free_mb=64", f"run.dir={run}"]) == 2
    err = _one_line(capsys)
    assert "10 MiB free" in err and "run.min_free_mb=64" in err and not run.exists()
    monkeypatch.setattr(rundir.shutil, "disk_usage", real)
    free_mb = real(tmp_path).free // 2**20
    with pytest.raises(UserError, match="run.min_free_mb"):  # the real disk, asked for more than it has
        fit(load_recipe(tiny_recipe, [f"run.min_free_mb={free_mb + 2**20}", f"run.dir={run}"]))
    assert not run.exists()


def test_disk_full_mid_run_keeps_the_last_good_checkpoint(tmp_path: Path, tiny_recipe: Path, monkeypatch) -> None:
    run = tmp_path / "run"
    real = ckpt_mod._write_synced
    saves = []

    def write(path: Path, data: bytes) -> None:
        if path.name == ".last.pt.tmp":
            saves.append(path)
            if len(saves) == 2:  # the disk fills up while round 2 is saved
                with open(path, "wb") as f:
                    f.write(data[: len(data) // 3])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data)

    monkeypatch.setattr(ckpt_mod, "_write_synced", write)
    with pytest.raises(UserError) as excinfo:
        fit(load_recipe(tiny_recipe, ["rounds=3", *FAST, f"run.dir={run}"]))
    message = str(excinfo.value)
    assert "\n" not in message and "last.pt" in message and "No space left" in message and "--resume" in message
    assert load_checkpoint(run / "checkpoints/last.pt")["rounds_completed"] == 1
    assert not (run / "checkpoints/.last.pt.tmp").exists()
    monkeypatch.setattr(ckpt_mod, "_write_synced", real)  # space freed: the run resumes and finishes
    res = fit(load_recipe(tiny_recipe, ["rounds=3", *FAST, f"run.dir={run}"]), resume=True)
    assert res["rounds_completed"] == 3


MEASURE = """
import json, resource, sys
from fedlight.config import load_recipe
from fedlight.engine.run.fit import fit
import torch
out = {}
for clients in (20, 1000):
    fit(load_recipe(sys.argv[1], [f"clients.num={clients}", f"run.dir={sys.argv[2]}/k{clients}", *sys.argv[3:]]))
    ckpt = torch.load(f"{sys.argv[2]}/k{clients}/checkpoints/last.pt", weights_only=True)
    out[clients] = {"peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                    "stored_clients": len(ckpt["clients"])}
print(json.dumps(out))
"""


def test_memory_is_bounded_by_persistent_state_not_by_the_number_of_clients(tmp_path: Path,
                                                                           tiny_recipe: Path) -> None:
    """1,000 clients of a stateless method (SimCLR + FedAvg), all sampled in one round, on synthetic
    data: the process's peak memory stays where 20 clients put it, and no per-client state is kept."""
    args = ["rounds=1", "partition.kind=iid", "fabric.threads=1", *FAST]  # one step per client with 2+ samples
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(tiny_recipe), str(tmp_path), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    small, large = out["20"], out["1000"]
    print(f"peak RSS: {small['peak_kb'] / 1024:.0f} MiB with 20 clients, {large['peak_kb'] / 1024:.0f} MiB with 1,000")
    assert small["stored_clients"] == large["stored_clients"] == 0
    assert large["peak_kb"] - small["peak_kb"] < 64 * 1024, out  # < 64 MiB more for 50x the clients
    history = json.loads((tmp_path / "k1000/results.json").read_text())["history"]
    assert len(history[0]["clients"]) == 1000 and history[0]["answered"] == 1000
    assert torch.load(tmp_path / "k1000/checkpoints/last.pt", weights_only=True)["rounds_completed"] == 1
