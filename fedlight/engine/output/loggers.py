"""The run's Lightning loggers (the recipe's ``loggers``), each writing in the run folder, and how a
resumed run appends to what its earlier starts wrote.

==============  ===============================================  ==========================================
name            Lightning class                                  where, in the run folder
==============  ===============================================  ==========================================
``tensorboard`` ``lightning.fabric.loggers.TensorBoardLogger``   ``tensorboard/`` (also the pictures)
``csv``         ``lightning.pytorch.loggers.CSVLogger``          ``csv/metrics.csv``, ``csv/hparams.yaml``
``wandb``       ``lightning.pytorch.loggers.WandbLogger``        ``wandb/offline-run-<time>-<id>/`` (offline)
``mlflow``      ``lightning.pytorch.loggers.MLFlowLogger``       ``mlruns/`` (a ``file:`` store)
==============  ===============================================  ==========================================

A resumed run drops what was logged after its checkpoint (TensorBoard's ``purge_step``, the CSV's
and MLflow's later rows) and goes on in the same files, W&B run id and MLflow run. Nothing leaves the machine:
W&B runs offline (``wandb sync <run folder>/wandb/offline-run-*`` uploads it later) and MLflow's
store is a folder (``mlflow ui --backend-store-uri <run folder>/mlruns``); their telemetry is off and
their caches are in fedlight's cache folder, not ``$HOME`` (``fedlight/stays_local.py``).
"""

from __future__ import annotations

import csv
import functools
import io
import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable

from lightning.fabric.loggers import Logger, TensorBoardLogger
from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
from matplotlib.figure import Figure

from fedlight import stays_local
from fedlight.atomic_files import atomic_write_bytes

PROJECT = "fedlight"  # the W&B project and the MLflow experiment of every run


class PictureSink:
    """What the parts draw on when the run's loggers leave TensorBoard out: its ``experiment`` takes
    every TensorBoard call (``add_figure``, ``add_histogram``, ...) and keeps nothing, closing the
    matplotlib figures it is handed."""

    @property
    def experiment(self) -> PictureSink:
        return self

    def __getattr__(self, name: str) -> Callable[..., None]:
        return self._drop

    @staticmethod
    def _drop(*args: Any, **kwargs: Any) -> None:
        for value in (*args, *kwargs.values()):
            if isinstance(value, Figure):
                import matplotlib.pyplot as plt  # here: fedlight.engine.output.tensorboard picks its backend

                plt.close(value)


class OfflineWandbLogger(WandbLogger):
    """Lightning's W&B logger that also closes its run when the run log does (Lightning leaves that to
    the process's exit, too late for the next run in the same process)."""

    def finalize(self, status: str) -> None:
        super().finalize(status)
        if self._experiment is not None:
            if status == "preempted":
                self._experiment.mark_preempting()
            self._experiment.finish(exit_code=0 if status in ("success", "preempted") else 1)
            self._experiment = None


class FolderMLFlowLogger(MLFlowLogger):
    """Lightning's MLflow logger, with a preempted run marked KILLED (MLflow's name for it) rather than
    handed to MLflow as an unknown status, and the hparams of a resumed run logged again as MLflow allows."""

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """MLflow keeps a parameter's first value: a resumed run logs its new ones, and the current values of
        those that changed (``rounds`` grown) as tags of the same name."""
        logged = self.experiment.get_run(self.run_id).data.params
        super().log_hyperparams({k: v for k, v in params.items() if k not in logged})
        for key, value in params.items():
            if key in logged and logged[key] != str(value)[:250]:  # Lightning's cut of a value
                self.experiment.set_tag(self.run_id, key, str(value))

    def finalize(self, status: str) -> None:
        super().finalize("KILLED" if status == "preempted" else status)


def tensorboard_logger(run_dir: Path, rounds_done: int) -> Logger:
    """``tensorboard/``; ``purge_step`` drops the events a killed run logged after its last checkpoint."""
    return TensorBoardLogger(str(run_dir), name="tensorboard", version="", default_hp_metric=False,
                             purge_step=rounds_done + 1)


def csv_logger(run_dir: Path, rounds_done: int) -> Logger:
    """``csv/metrics.csv`` (a row a step, written at once) and ``csv/hparams.yaml``; a resumed run keeps the
    rows up to ``rounds_done`` and appends to them.

    Lightning's writer deletes the file it finds, so the kept rows first go (whole: written aside, then
    renamed) to ``csv/metrics.kept.csv``, which becomes ``metrics.csv`` once the writer is made: a resume
    killed on the way finds them there. A row cut short (a kill mid-write) and the rows after it are lost.
    A new metric (the first evaluation's) makes Lightning write the file again under a wider header; it
    truncates the file first, so a kill mid-write would lose every row, and here the file is written
    aside and renamed over it instead.
    """
    folder = run_dir / "csv"
    path, kept_path = folder / "metrics.csv", folder / "metrics.kept.csv"
    source = kept_path if kept_path.is_file() else path
    header, kept = _rows_up_to(source, rounds_done) if source.is_file() else ([], [])
    if kept:
        _write_whole(kept_path, header, kept)
    logger = CSVLogger(str(run_dir), name="csv", version="", flush_logs_every_n_steps=1)
    with warnings.catch_warnings():  # "exists and is not empty ... will be deleted": metrics.kept.csv is kept
        warnings.filterwarnings("ignore", message=".*exists and is not empty")
        writer = logger.experiment  # deletes metrics.csv
    if hasattr(writer, "_rewrite_with_new_header"):  # private (Lightning 2.6): test_loggers fails if it stops applying
        writer._rewrite_with_new_header = functools.partial(_rewrite_whole, path)  # noqa: SLF001 (why: above)
    if kept:
        os.replace(kept_path, path)
        writer.metrics_keys = header  # appended rows follow the file's header; a new key rewrites it
    for left in (kept_path, *folder.glob(".metrics*.tmp")):  # a kill's leftovers
        left.unlink(missing_ok=True)
    return logger


def _rewrite_whole(path: Path, fieldnames: list[str]) -> None:
    """``path``'s rows again under the wider header ``fieldnames``, whole or not at all (Lightning's
    ``_rewrite_with_new_header`` without its truncation)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    _write_whole(path, fieldnames, rows)


def _write_whole(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    """Write ``rows`` (one mapping a row, from column name to text) under ``header`` to ``path``, whole
    or not at all."""
    atomic_write_bytes(path, _csv_text(header, rows))


def _whole_lines(text: str) -> str:
    """``text`` up to its last newline: a last line without one was cut mid-write by a kill."""
    return text[:text.rfind("\n") + 1]


def _rows_up_to(path: Path, rounds_done: int) -> tuple[list[str], list[dict[str, str]]]:
    """(the header, the rows of steps up to ``rounds_done``) of a metrics.csv, up to its first row cut short.

    A last line without its newline was cut mid-write, even where it has every field (cut inside the
    last one), so it is dropped.
    """
    with open(path, newline="") as f:
        text = f.read()
    with io.StringIO(_whole_lines(text), newline="") as f:
        reader = csv.DictReader(f)
        rows = []
        for row in reader:
            if None in row.values() or None in row or not row["step"].isdigit():  # cut short, or not a row
                break
            if int(row["step"]) <= rounds_done:
                rows.append(row)
        return list(reader.fieldnames or []), rows


def _csv_text(header: list[str], rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def wandb_logger(run_dir: Path, rounds_done: int) -> Logger:
    """An offline W&B run under ``wandb/``; a resumed run goes on under the same run id (a new
    ``offline-run-*`` folder, merged into one run by ``wandb sync``)."""
    with stays_local.temporary_files_in_cache():  # W&B's import-time temporary folders (fedlight/stays_local.py)
        import wandb

    earlier = sorted((run_dir / "wandb").glob("offline-run-*"))
    run_id = earlier[-1].name.rsplit("-", 1)[-1] if earlier else None  # None: W&B draws one
    return OfflineWandbLogger(name=run_dir.name, save_dir=str(run_dir), offline=True, project=PROJECT, id=run_id,
                              resume="allow" if earlier else None,
                              settings=wandb.Settings(console="off", silent=True, x_disable_stats=True))


def mlflow_logger(run_dir: Path, rounds_done: int) -> Logger:
    """An MLflow run in the file store ``mlruns/`` (MLflow 3 keeps that store only when
    ``MLFLOW_ALLOW_FILE_STORE`` is set: set here unless the environment says otherwise); a resumed run
    goes on in the store's run, its metrics first cut back to ``rounds_done`` (:func:`_trim_mlflow_metrics`)."""
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    store = (run_dir / "mlruns").resolve()
    _trim_mlflow_metrics(store, rounds_done)
    client = MlflowClient(f"file:{store}")
    experiment = client.get_experiment_by_name(PROJECT) if store.is_dir() else None
    runs = client.search_runs([experiment.experiment_id], max_results=1) if experiment else []
    return FolderMLFlowLogger(experiment_name=PROJECT, run_name=run_dir.name, tracking_uri=f"file:{store}",
                              run_id=runs[0].info.run_id if runs else None)


def _trim_mlflow_metrics(store: Path, rounds_done: int) -> None:
    """Keep, in each metric file of the file store ``store``, the whole lines of steps up to ``rounds_done``.

    MLflow's file store appends a line ``<timestamp> <value> [<step>[ <dataset> <digest>]]`` per value
    (no step: step 0) to ``<experiment>/<run>/metrics/<metric name>``. A kill mid-line leaves a fragment
    that MLflow's ``get_run`` refuses ("malformed") on the next start, so the run could never resume; and
    the steps after the checkpoint would be logged twice. Each changed file is rewritten atomically; one
    left with no line goes (MLflow refuses an empty metric file too), as does a temporary file of this
    trim that a kill left (MLflow would read it as a metric).
    """
    for path in store.glob("*/*/metrics/**/*"):
        if not path.is_file():
            continue
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            path.unlink()
            continue
        text = path.read_text()
        lines = _whole_lines(text).splitlines(keepends=True)
        kept = "".join(line for line in lines if _mlflow_step(line) <= rounds_done)
        if not kept:
            path.unlink()
        elif kept != text:
            atomic_write_bytes(path, kept.encode())


def _mlflow_step(line: str) -> float:
    """The step of a metric line of MLflow's file store; infinity for a line MLflow would refuse."""
    fields = line.split()
    if len(fields) not in (2, 3, 5):
        return math.inf
    step = fields[2] if len(fields) > 2 else "0"
    return int(step) if step.isdigit() else math.inf


BUILDERS: dict[str, Callable[[Path, int], Logger]] = {
    "tensorboard": tensorboard_logger, "csv": csv_logger, "wandb": wandb_logger, "mlflow": mlflow_logger}


def open_loggers(names: tuple[str, ...], run_dir: Path, rounds_done: int) -> list[Logger]:
    """The loggers ``names`` (the recipe's ``loggers``) of the run folder ``run_dir``, whose run has
    completed ``rounds_done`` rounds (0: a fresh run)."""
    return [BUILDERS[name](run_dir, rounds_done) for name in names]
