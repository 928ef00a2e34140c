"""Short real runs on synthetic data: schema, TensorBoard, resume, ranks."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import lightning
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import cli_process
import fedlight
from conftest import SMALL_RUN
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop import provenance
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.loop.sampling import sample_clients

# the default readings' columns (docs/reading-a-run.md): in final and baseline beside the probe and kNN
READINGS = ("rankme", "spectrum_top1", "alignment", "uniformity", "embedding_std_mean", "client_knn_acc",
            "client_knn_acc_worst10", "client_knn_acc_std")
from fedlight.engine.run.fit import fit

REPO = Path(__file__).resolve().parents[1]
SMALL = [*SMALL_RUN, "eval.probe_epochs=2", "eval.knn_k=5", "eval.projector_samples=0"]  # resume, provenance, ranks


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _strip_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in history]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory) -> tuple[dict, Path]:
    """(the result, the run folder) of the small recipe's 4 rounds without a stop, which the resume
    tests compare with, made once."""
    from conftest import TINY

    tmp = tmp_path_factory.mktemp("straight")
    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    return fit(load_recipe(recipe, [*SMALL, "rounds=4", f"run.dir={tmp / 'run'}"])), tmp / "run"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    from conftest import TINY

    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO) + f"run: {{dir: {tmp / 'run'}}}\n")
    # as a user runs it: the process ends at once after success (cli.run), nothing may be lost
    proc = cli_process.run(["fit", "--recipe", str(recipe), *SMALL_RUN], env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and "final: linear probe, 100% labels" in proc.stdout, proc.stderr[-2000:]
    # off a terminal: one plain line per round, no carriage-return progress bars
    assert [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("round ")] == ["round 1/2",
                                                                                                     "round 2/2"]
    assert "\r" not in proc.stdout + proc.stderr and "it/s" not in proc.stderr
    return tmp / "run"


def test_results_json_schema(tiny_run: Path) -> None:
    res = json.loads((tiny_run / "results.json").read_text())
    assert set(res) == {"recipe", "rounds_completed", "history", "final", "baseline", "comm", "wall_seconds",
                        "provenance", "inputs", "collapse"}
    assert res["rounds_completed"] == 2 and len(res["history"]) == 2
    for row in res["history"]:
        assert {"round", "train_loss", "linear_probe_acc", "knn_acc", "bytes_up", "bytes_down",
                "bytes_d2d", *TIMING} <= set(row)
        assert 0 < row["train_seconds"] < row["seconds"] and 0 < row["eval_seconds"] < row["seconds"]
        assert 0 <= row["linear_probe_acc"] <= 1 and row["bytes_up"] > 0 and row["bytes_d2d"] == 0
    # SimCLR has no classifier: no test_acc anywhere (not a null)
    assert set(res["final"]) == set(res["baseline"]) == {"linear_probe_acc", "knn_acc", *READINGS}
    assert res["collapse"] is None
    assert not [row for row in res["history"] if "test_acc" in row]
    assert res["comm"]["bytes_up"] == sum(r["bytes_up"] for r in res["history"])
    assert res["recipe"]["data"]["name"] == "synthetic"


def _utc(text: str) -> datetime:
    assert text.endswith("Z")
    return datetime.fromisoformat(text.removesuffix("Z") + "+00:00")


def test_results_json_records_provenance(tiny_run: Path) -> None:
    found = json.loads((tiny_run / "results.json").read_text())["provenance"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert found["commit"] == head.stdout.strip() and isinstance(found["dirty"], bool) and found["git_note"] is None
    assert found["fedlight"] == fedlight.__version__ and found["torch"] == torch.__version__
    assert found["lightning"] == lightning.__version__ and found["python"] == platform.python_version()
    assert (found["device"], found["processes"]) == ("cpu", 1)
    assert _utc(found["start"]) <= _utc(found["end"]) <= datetime.now(timezone.utc)
    assert [{**found, "segments": None}] == [{**seg, "segments": None} for seg in found["segments"]]


def test_resume_appends_a_provenance_segment_and_keeps_the_start(tmp_path: Path, tiny_recipe: Path,
                                                                 monkeypatch) -> None:
    fit(load_recipe(tiny_recipe, [*SMALL, "rounds=1"]))
    first = json.loads((tmp_path / "run/results.json").read_text())["provenance"]
    other = {"commit": "c" * 40, "dirty": False, "git_note": None}  # resumed on other code
    monkeypatch.setattr(provenance, "git_source", lambda _: other)
    found = fit(load_recipe(tiny_recipe, [*SMALL, "rounds=2"]), resume=True)["provenance"]
    assert found == json.loads((tmp_path / "run/results.json").read_text())["provenance"]
    assert found["start"] == first["start"] and found["commit"] == "c" * 40
    assert [seg["commit"] for seg in found["segments"]] == [first["commit"], "c" * 40]
    ends = [_utc(t) for seg in found["segments"] for t in (seg["start"], seg["end"])]
    assert ends == sorted(ends) and found["end"] == found["segments"][-1]["end"]


def test_bytes_are_the_real_payload_size(tiny_run: Path) -> None:
    res = json.loads((tiny_run / "results.json").read_text())
    shared = _global(tiny_run)
    size = sum(v.numel() * v.element_size() for v in shared.values())
    assert res["history"][0]["bytes_up"] == 2 * size == res["history"][0]["bytes_down"]
    lines = (tiny_run / "comm.csv").read_text().splitlines()
    assert lines[0] == "round,client,direction,dtype,bytes" and len(lines) > 1


def test_run_folder_contents(tiny_run: Path) -> None:
    assert (tiny_run / "recipe.yaml").is_file()
    assert load_recipe(tiny_run / "recipe.yaml").rounds == 2
    assert (tiny_run / "checkpoints/last.pt").is_file()


def test_tensorboard_has_the_scalars(tiny_run: Path) -> None:
    acc = EventAccumulator(str(tiny_run / "tensorboard"), size_guidance={"images": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "accuracy/linear_probe_acc", "accuracy/knn_acc", "comm/bytes_up", "comm/bytes_down",
            "time/train_seconds", "final/knn_acc"} <= tags
    assert not [t for t in tags if t.startswith(("baseline/", "eval/"))]
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2]
    # the random-init encoder is step 0 of the accuracy curves; the final metrics sit at the last round
    res = json.loads((tiny_run / "results.json").read_text())
    probe = acc.Scalars("accuracy/linear_probe_acc")
    assert [e.step for e in probe] == [0, 1, 2]
    assert probe[0].value == pytest.approx(res["baseline"]["linear_probe_acc"])
    assert [e.step for e in acc.Scalars("final/knn_acc")] == [2]
    assert acc.Scalars("final/knn_acc")[0].value == pytest.approx(res["final"]["knn_acc"])
    assert min(t.split("/")[0] for t in tags) == "accuracy"  # the first group TensorBoard lists
    assert "data/partition" in acc.Tags()["images"]
    assert (tiny_run / "tensorboard" / "projector_config.pbtxt").is_file() or any(
        p.name == "projector_config.pbtxt" for p in (tiny_run / "tensorboard").rglob("*"))


def test_non_empty_run_folder_is_not_overwritten(tiny_recipe: Path, tiny_run: Path, capsys) -> None:
    before = (tiny_run / "results.json").read_bytes()
    assert main(["fit", "--recipe", str(tiny_recipe), f"run.dir={tiny_run}"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (tiny_run / "results.json").read_bytes() == before


def test_resume_equals_straight_run_bit_for_bit(tmp_path: Path, tiny_recipe: Path, straight_run) -> None:
    straight, straight_dir = straight_run
    fit(load_recipe(tiny_recipe, [*SMALL, "rounds=2", f"run.dir={tmp_path / 'b'}"]))
    resumed = fit(load_recipe(tiny_recipe, [*SMALL, "rounds=4", f"run.dir={tmp_path / 'b'}"]), resume=True)
    a, b = _global(straight_dir), _global(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _strip_time(straight["history"]) == _strip_time(resumed["history"])
    assert straight["final"] == resumed["final"]


def test_resume_refuses_a_changed_recipe(tmp_path: Path, tiny_recipe: Path) -> None:
    fit(load_recipe(tiny_recipe, [*SMALL, "rounds=1", f"run.dir={tmp_path / 'r'}"]))
    from fedlight.errors import UserError

    with pytest.raises(UserError, match="partition"):
        fit(load_recipe(tiny_recipe, [*SMALL, "rounds=2", "partition.alpha=5", f"run.dir={tmp_path / 'r'}"]),
            resume=True)


def test_byol_and_supervised_run_and_keep_private_state(tmp_path: Path, tiny_recipe: Path) -> None:
    res = fit(load_recipe(tiny_recipe, ["method={name: byol, hidden_dim: 32, output_dim: 16}", *SMALL,
                                        f"run.dir={tmp_path / 'byol'}"]))
    assert res["rounds_completed"] == 2
    clients = torch.load(tmp_path / "byol/checkpoints/last.pt", weights_only=True)["clients"]
    assert sorted(clients) == [0, 1] and all(k.startswith(("backbone_momentum", "projection_head_momentum"))
                                             for k in clients[0])
    res = fit(load_recipe(tiny_recipe, ["method.name=supervised", "method={name: supervised}",
                                        "views.blur_p=[0.0]", f"run.dir={tmp_path / 'sup'}"]))
    assert res["final"]["linear_probe_acc"] > 0.5  # synthetic classes are easy when labels are used


def test_client_sampling_is_seeded_and_sized() -> None:
    a = sample_clients(0, 3, 100, 0.1)
    assert a == sample_clients(0, 3, 100, 0.1) and len(a) == 10 and a == sorted(set(a))
    assert a != sample_clients(0, 4, 100, 0.1)
    assert sample_clients(0, 0, 5, 0.01) and len(sample_clients(0, 0, 5, 0.01)) == 1


def test_two_processes_match_one(tmp_path: Path, tiny_recipe: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for devices in (1, 2):  # rank 0 forked, rank 1 (devices=2) a `python -m fedlight` that rank 0 starts
        proc = cli_process.run(["fit", "--recipe", str(tiny_recipe), "clients.num=4", *SMALL, f"fabric.devices={devices}",
                                "fabric.threads=1", f"run.dir={tmp_path / str(devices)}"], env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = _global(tmp_path / "1"), _global(tmp_path / "2")
    for k in one:
        assert torch.allclose(one[k].double(), two[k].double(), atol=1e-5, rtol=1e-4), k
    r1 = json.loads((tmp_path / "1/results.json").read_text())
    r2 = json.loads((tmp_path / "2/results.json").read_text())
    assert r1["comm"] == r2["comm"]
    assert [h["clients"] for h in r1["history"]] == [h["clients"] for h in r2["history"]]
    assert (r1["provenance"]["processes"], r2["provenance"]["processes"]) == (1, 2)  # rank 0 records the world


def test_fit_gives_torchs_thread_count_back(tmp_path: Path, tiny_recipe: Path) -> None:
    """``fabric.threads`` holds for the run only: an in-process run after it (a notebook's next cell, the
    bit-exact references of the resume tests) gets the caller's thread count, whichever ran first."""
    before = torch.get_num_threads()
    fit(load_recipe(tiny_recipe, [*SMALL, "rounds=1", f"fabric.threads={before + 1}",
                                  f"run.dir={tmp_path / 'run'}"]))
    assert torch.get_num_threads() == before


def test_sigkill_mid_run_then_resume_ends_where_a_straight_run_ends(tmp_path: Path, tiny_recipe: Path,
                                                                    straight_run) -> None:
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = tmp_path / "killed"
    cmd = [sys.executable, "-m", "fedlight", "fit", "--recipe", str(tiny_recipe), *SMALL, "rounds=4", f"run.dir={run}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600  # generous: imports alone take minutes on a loaded machine
    while time.time() < deadline and proc.poll() is None and not (run / "checkpoints/last.pt").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert torch.load(run / "checkpoints/last.pt", weights_only=True)["rounds_completed"] < 4  # killed mid-run
    again = cli_process.run([*cmd[3:], "--resume"], env=env)  # the killed one was a `python -m fedlight`
    assert again.returncode == 0, again.stderr[-2000:]
    straight, straight_dir = straight_run
    a, b = _global(straight_dir), _global(run)
    assert all(torch.equal(a[k], b[k]) for k in a)
    resumed = json.loads((run / "results.json").read_text())
    assert _strip_time(resumed["history"]) == _strip_time(straight["history"])


def test_stateless_clients_are_dealt_to_ranks_by_samples() -> None:
    from fedlight.engine.loop.sampling import deal_clients

    dealt = deal_clients([1, 2, 4, 6], [100, 500, 400, 300], 2)
    assert sorted(c for clients in dealt for c in clients) == [1, 2, 4, 6]  # every client once
    assert dealt == [[1, 2], [4, 6]]  # 600 and 700 samples, where id parity would give 100 and 1,200
    assert deal_clients([3], [5], 2) == [[3], []]  # a rank may get none; it still joins the collective
