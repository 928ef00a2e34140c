"""The recipe's ``loggers``: CSV, W&B (offline) and MLflow (a file store) get every per-round scalar,
the same values as results.json's history, in the run folder, and a resumed run appends to them."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
import yaml

from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.output.loggers import csv_logger
from fedlight.engine.loop.run_log import scalar_tag
from fedlight.engine.run.fit import fit
from fedlight.engine.run.same_experiment import check_same_experiment
from fedlight.engine.state.run_files import RECIPE
from fedlight.errors import UserError

HAVE = {name: importlib.util.find_spec(name) is not None for name in ("wandb", "mlflow")}
FAST = ["eval.probe_epochs=2", "eval.projector_samples=0", "local.batch_size=32"]
ROUND_SCALARS = {"accuracy/linear_probe_acc": "linear_probe_acc", "accuracy/knn_acc": "knn_acc",
                 "train/loss": "train_loss", "train/lr": "lr", "comm/bytes_up": "bytes_up",
                 "time/round_seconds": "seconds"}


def needs(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not HAVE[name], reason=f"{name} is not installed: pip install 'fedlight[loggers]'")


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """2 rounds with every logger installed here, then ``--resume`` to 3 rounds; results.json and the run folder."""
    from conftest import REPO, TINY

    tmp = tmp_path_factory.mktemp("loggers")
    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO))
    names = ["tensorboard", "csv", *(name for name in ("wandb", "mlflow") if HAVE[name])]
    args = [f"loggers=[{','.join(names)}]", *FAST, f"run.dir={tmp / 'run'}"]
    fit(load_recipe(recipe, ["rounds=2", *args]))
    results = fit(load_recipe(recipe, ["rounds=3", *args]), resume=True)
    return {"results": results, "dir": tmp / "run"}


def expected(results: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Each step's scalars as results.json has them: the random-init encoder's at 0, each round's after."""
    steps = {0: {scalar_tag(k): v for k, v in results["baseline"].items() if v is not None}}
    for row in results["history"]:
        steps[row["round"]] = {tag: row[column] for tag, column in ROUND_SCALARS.items()}
    return steps


def test_csv_has_each_step_once_with_the_history_values(logged_run: dict[str, Any]) -> None:
    with open(logged_run["dir"] / "csv/metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    results, by_step = logged_run["results"], {}
    for row in rows:
        if not any(k.startswith("final/") and v for k, v in row.items()):
            assert int(row["step"]) not in by_step, f"step {row['step']} logged twice"
            by_step[int(row["step"])] = {k: float(v) for k, v in row.items() if v and k != "step"}
    want = expected(results)
    assert sorted(by_step) == [0, 1, 2, 3]  # the resumed start appended round 3 to rounds 0-2
    for step, scalars in want.items():
        assert {k: by_step[step][k] for k in scalars} == pytest.approx(scalars, rel=1e-6), step
    finals = [row for row in rows if row.get("final/knn_acc")]
    assert [int(row["step"]) for row in finals] == [2, 3]  # each start's last round, as TensorBoard's hparams
    assert float(finals[-1]["final/knn_acc"]) == pytest.approx(results["final"]["knn_acc"])
    hparams = yaml.safe_load((logged_run["dir"] / "csv/hparams.yaml").read_text())
    assert hparams["method/name"] == "simclr" and hparams["rounds"] == 3


@needs("mlflow")
def test_mlflow_file_store_has_one_run_with_the_history_values(logged_run: dict[str, Any]) -> None:
    runs = [p.parent for p in (logged_run["dir"] / "mlruns").glob("*/*/meta.yaml")]
    assert len(runs) == 1  # the resumed start went on in the same run
    run = runs[0]
    for step, scalars in expected(logged_run["results"]).items():
        for tag, value in scalars.items():
            lines = [line.split() for line in (run / "metrics" / tag).read_text().splitlines()]
            logged = {int(s): float(v) for _, v, s in lines}
            assert len(logged) == len(lines), f"{tag}: a step logged twice"
            assert logged[step] == pytest.approx(value, rel=1e-6), (tag, step)
    assert (run / "params/method/name").read_text() == "simclr"
    assert (run / "params/rounds").read_text() == "2" and (run / "tags/rounds").read_text() == "3"
    assert "status: 3" in (run / "meta.yaml").read_text()  # FINISHED


@needs("mlflow")
def test_mlflow_resume_cuts_a_killed_starts_metrics_back_to_the_checkpoint(
        logged_run: dict[str, Any], tmp_path: Path) -> None:
    """A kill mid-line left a fragment MLflow's ``get_run`` calls malformed, and rounds after the checkpoint."""
    import shutil

    from fedlight.engine.output.loggers import mlflow_logger

    shutil.copytree(logged_run["dir"] / "mlruns", tmp_path / "mlruns")
    metric = next((tmp_path / "mlruns").glob("*/*/metrics/accuracy/knn_acc"))
    logged = metric.read_text()
    metric.write_text(logged + "1764000000000 55.5 4\n17640000")  # round 4, then a cut line
    new = metric.with_name("new_acc")  # a metric first logged in round 4: nothing of it is left
    new.write_text("1764000000000 55.5 4\n")
    leftover = metric.with_name(".knn_acc.tmp")  # a kill inside an earlier trim's write
    leftover.write_text("17640")
    logger = mlflow_logger(tmp_path, rounds_done=3)
    assert logger.experiment.get_run(logger.run_id).data.metrics["accuracy/knn_acc"] is not None
    assert metric.read_text() == logged  # steps 0-3, whole
    assert not new.exists() and not leftover.exists()  # MLflow refuses an empty metric file, reads a .tmp one
    mlflow_logger(tmp_path, rounds_done=2)
    assert [int(line.split()[2]) for line in metric.read_text().splitlines()] == [0, 1, 2]


def wandb_records(path: Path, block: int = 32768) -> Iterator[Any]:
    """The protobuf records of a ``.wandb`` file (LevelDB's log format after a 7-byte header)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunks = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's zero-filled tail
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunks, pos = chunks + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a record's full or last chunk
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


@needs("wandb")
def test_wandb_offline_runs_share_an_id_and_hold_the_history_values(logged_run: dict[str, Any]) -> None:
    folders = sorted((logged_run["dir"] / "wandb").glob("offline-run-*"))
    ids = {folder.name.rsplit("-", 1)[-1] for folder in folders}
    assert len(folders) == 2 and len(ids) == 1  # the resumed start: a second folder of the same run
    rows, config = [], {}
    for folder in folders:
        for record in wandb_records(folder / f"run-{folder.name.rsplit('-', 1)[-1]}.wandb"):
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
            elif kind == "config":
                config.update({i.key: json.loads(i.value_json) for i in record.config.update})
    by_step = {}
    for row in rows:
        if "final/knn_acc" not in row:
            assert row["trainer/global_step"] not in by_step, row
            by_step[row["trainer/global_step"]] = row
    want = expected(logged_run["results"])
    assert sorted(by_step) == sorted(want) == [0, 1, 2, 3]
    for step, scalars in want.items():
        assert {k: by_step[step][k] for k in scalars} == pytest.approx(scalars, rel=1e-6), step
    assert config["method/name"] == "simclr"


def test_loggers_are_not_the_experiment_but_the_learning_rate_is(logged_run: dict[str, Any]) -> None:
    """``--resume`` may add or drop a logger (it changes no number); it still refuses another ``local.lr``."""
    saved = yaml.safe_load((logged_run["dir"] / RECIPE).read_text())
    check_same_experiment(logged_run["dir"], {**saved, "loggers": ["csv"]})
    with pytest.raises(UserError, match="local.lr"):
        check_same_experiment(logged_run["dir"], {**saved, "loggers": ["csv"], "local": {**saved["local"], "lr": 0.5}})


def test_a_run_without_tensorboard_writes_no_tensorboard_folder(tiny_recipe: Path) -> None:
    """The parts' pictures (the partition, the update norms' histogram) go nowhere, and nothing fails."""
    results = fit(load_recipe(tiny_recipe, ["loggers=[csv]", "rounds=1", *FAST]))
    run = tiny_recipe.parent / "run"
    assert not (run / "tensorboard").exists()
    with open(run / "csv/metrics.csv", newline="") as f:
        knn = [float(row["accuracy/knn_acc"]) for row in csv.DictReader(f) if row["accuracy/knn_acc"]]
    assert knn == pytest.approx([results["baseline"]["knn_acc"], results["history"][0]["knn_acc"]])


@pytest.mark.parametrize("override, named", [
    ("loggers=[tensorboard,wandb]", "loggers: wandb needs the wandb package, which is not installed; "
                                    "pip install 'fedlight[loggers]'"),
    ("loggers=[csv,csv]", "recipe key 'loggers' names csv more than once")])
def test_a_bad_logger_stops_in_one_line_before_the_run_folder(tiny_recipe: Path, capsys, monkeypatch,
                                                               override: str, named: str) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: find_spec answers None
    code = main(["fit", "--recipe", str(tiny_recipe), override])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tiny_recipe.parent / "run").exists()


METRICS_CSV = "accuracy/knn_acc,step,train/loss\n0.5,0,\n0.6,1,2.0\n0.7,2,1.5\n0.8,3,1.2\n"


@pytest.mark.parametrize("damage", ["killed mid-resume", "cut mid-row"])
def test_a_resume_keeps_the_csv_rows_a_kill_left(tmp_path: Path, damage: str) -> None:
    """A resume killed between Lightning's deleting metrics.csv and the kept rows' return finds them in
    metrics.kept.csv; a file cut mid-row keeps the rows before the cut. Either way the next rows append."""
    folder = tmp_path / "csv"
    folder.mkdir()
    if damage == "killed mid-resume":  # the kept rows of steps 0-2 (of a resume at round 2), metrics.csv gone
        (folder / "metrics.kept.csv").write_text(METRICS_CSV.rsplit("0.8", 1)[0])
    else:  # step 3's row cut after its first cell
        (folder / "metrics.csv").write_text(METRICS_CSV.rsplit(",3", 1)[0])
    logger = csv_logger(tmp_path, rounds_done=2)
    logger.log_metrics({"accuracy/knn_acc": 0.9, "train/loss": 1.0}, step=3)
    logger.finalize("success")
    with open(folder / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["accuracy/knn_acc"], r["train/loss"]) for r in rows] == [
        ("0", "0.5", ""), ("1", "0.6", "2.0"), ("2", "0.7", "1.5"), ("3", "0.9", "1.0")]
    assert [p.name for p in folder.iterdir()] == ["metrics.csv"]  # no metrics.kept.csv left


def test_a_row_cut_inside_its_last_cell_is_dropped(tmp_path: Path) -> None:
    """Step 3's row cut inside its last cell has every field (train/loss reads '1.' for 1.2): with no
    newline after it, it was cut, so a resume at round 3 keeps steps 0-2 only, not a wrong number."""
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text(METRICS_CSV[:-2])
    csv_logger(tmp_path, rounds_done=3).finalize("success")
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        assert [r["step"] for r in csv.DictReader(f)] == ["0", "1", "2"]


def test_a_new_metric_rewrites_the_csv_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first evaluation's metric widens the header, so the file is written again: a kill mid-write
    leaves the old file whole (Lightning's own rewrite truncates it first) for the resume to go on from."""
    logger = csv_logger(tmp_path, rounds_done=0)
    for step in (1, 2):
        logger.log_metrics({"train/loss": 3.0 - step}, step=step)
    path = tmp_path / "csv" / "metrics.csv"
    before = path.read_text()

    def killed(self: csv.DictWriter, rows: object) -> None:
        raise KeyboardInterrupt("killed mid-write")

    with monkeypatch.context() as patched:
        patched.setattr(csv.DictWriter, "writerows", killed)
        with pytest.raises(KeyboardInterrupt):
            logger.log_metrics({"accuracy/knn_acc": 0.5, "train/loss": 0.5}, step=3)
    assert path.read_text() == before
    (path.parent / ".metrics.csv.tmp").write_text("accuracy/knn_acc,st")  # a kill between write and rename
    resumed = csv_logger(tmp_path, rounds_done=2)  # the run resumes from its round-2 checkpoint
    resumed.log_metrics({"accuracy/knn_acc": 0.6, "train/loss": 0.4}, step=3)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["accuracy/knn_acc"], r["train/loss"]) for r in rows] == [
        ("1", "", "2.0"), ("2", "", "1.0"), ("3", "0.6", "0.4")]
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.csv"]


ROUND_2 = {"round": 2, "seconds": 1.0, "train_seconds": 0.5, "eval_seconds": 0.0, "lr": 0.1, "train_loss": 0.25,
           "bytes_up": 10, "bytes_down": 10, "bytes_d2d": 0}  # a history row, as RunLog.round takes it


def test_a_rounds_scalars_are_on_disk_when_round_returns(tmp_path: Path) -> None:
    """Once the round's checkpoint is written (right after its log) a resume logs only later rounds: its
    TensorBoard events and CSV row must not wait in a buffer (TensorBoard's holds up to 120 s) for a kill."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedlight.engine.loop.run_log import RunLog

    log = RunLog(tmp_path, [], None, [], loggers=("tensorboard", "csv"))
    log.open(rounds_done=1, ledger=[], baseline=None)  # a resumed run: nothing of the data is drawn
    log.round(ROUND_2, [], [])
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(2, 0.25)]
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        assert [r["train/loss"] for r in csv.DictReader(f)] == ["0.25"]
    log.finish("success")


@pytest.mark.parametrize("kill", ["before", "after"])
def test_a_kill_beside_round_2s_checkpoint_leaves_each_round_logged_once_after_the_resume(
        tiny_recipe: Path, monkeypatch: pytest.MonkeyPatch, kill: str) -> None:
    """Round 2 is logged, then the run is killed just before its checkpoint (the resume drops round 2 from
    the loggers and comm.csv, the checkpoint holding round 1, and logs it again) or just after it (nothing
    is left to log: round 2's curves must already be on disk). Either way each round is there once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedlight.engine.loop.run_checkpoint import RunCheckpoint

    from conftest import QUICK_EVAL, SMALL_RUN

    args, save, saves = ["loggers=[tensorboard,csv]", *SMALL_RUN, *QUICK_EVAL], RunCheckpoint.save, []

    def killed_at_round_2(self: RunCheckpoint, state: Any, *rest: Any, **kw: Any) -> None:
        saves.append(state.rounds_done)
        if kill == "after" or state.rounds_done < 2:
            save(self, state, *rest, **kw)
        if state.rounds_done == 2:
            raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(RunCheckpoint, "save", killed_at_round_2)
        with pytest.raises(KeyboardInterrupt):
            fit(load_recipe(tiny_recipe, args))
    assert saves == [1, 2]
    results = fit(load_recipe(tiny_recipe, args), resume=True)
    run = tiny_recipe.parent / "run"
    with open(run / "csv/metrics.csv", newline="") as f:
        losses = [(int(r["step"]), float(r["train/loss"])) for r in csv.DictReader(f) if r["train/loss"]]
    history = [(row["round"], pytest.approx(row["train_loss"], rel=1e-6)) for row in results["history"]]
    assert losses == history  # rounds 1 and 2, once each
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == history
    rows = (run / "comm.csv").read_text().splitlines()[1:]
    assert len(rows) == len(set(rows)) and len({row.split(",")[0] for row in rows}) == 2  # each round's, once


def test_a_logger_that_fails_still_lets_the_round_be_saved(tiny_recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loggers come before the checkpoint: their error must not cost the round's training."""
    from conftest import QUICK_EVAL, SMALL_RUN

    from fedlight.engine.loop.run_log import RunLog

    def full_disk(self: RunLog, row: dict[str, Any], *rest: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunLog, "round", full_disk)
    with pytest.raises(OSError, match="No space"):
        fit(load_recipe(tiny_recipe, [*SMALL_RUN, *QUICK_EVAL, "rounds=2"]))
    ckpt = torch.load(tiny_recipe.parent / "run/checkpoints/last.pt", weights_only=True)
    assert ckpt["rounds_completed"] == 1


def test_a_full_disk_at_comm_csv_is_one_line_and_the_next_start_rewrites_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """comm.csv (and faults.csv, through the same ``append_csv``) is appended each round; a full disk there is
    the user's to fix, said in one line, and the next start's ``open`` writes the checkpoint's rows whole again."""
    from fedlight.engine.loop import comm_ledger, run_log
    from fedlight.errors import UserError

    log = run_log.RunLog(tmp_path, [], None, [], loggers=("csv",))
    log.open(rounds_done=1, ledger=[], baseline=None)

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(comm_ledger, "open", full_disk, raising=False)  # the module's open, not the loggers'
    with pytest.raises(UserError, match=r"cannot append to '.*comm\.csv' \(No space left on device\).*free space"):
        log.round(ROUND_2, [], [])
