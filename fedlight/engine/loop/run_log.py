"""What a run shows as it goes (rank 0): its loggers' scalars, TensorBoard's pictures, ``comm.csv``.

The round loop's own scalars (time, loss, learning rate, bytes, probe and kNN), the server's
own numbers (``Aggregator.metrics``, e.g. DP-FedAvg's privacy spent, as ``server/<name>``) and the
histogram of the clients' update norms are logged here; every plug-in adds its own through
``RoundPlugin.log_open``, ``log_round`` and ``log_clients``. The scalars and the hparams go to
every logger the recipe's ``loggers`` name (``fedlight.engine.output.loggers``), the pictures to
TensorBoard alone.

The accuracies are ``accuracy/*`` (``ACCURACY``): TensorBoard lists tag groups alphabetically,
so they come first; the random-init encoder's are their step 0, each evaluation's the round's
step, and the run's final metrics (``final/*``, beside its hparams) the last round's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from lightning.fabric.loggers import Logger, TensorBoardLogger

from fedlight.data.image_data import ImageData
from fedlight.data.partition_picture import partition_picture, partition_summary, write_summary
from fedlight.engine.loop.comm_ledger import CommLedger, append_csv, rewrite_csv
from fedlight.engine.loop.evaluator import LABEL_FREE, METRICS, READING_COLUMNS
from fedlight.engine.loop.interfaces import ACCURACY
from fedlight.engine.loop.interfaces import Report, RoundPlugin
from fedlight.engine.output.loggers import PictureSink, open_loggers
from fedlight.engine.output.tensorboard import run_hparams
from fedlight.engine.output.virtual_time import redraw_time_curves


REPRESENTATION = "representation"  # the TensorBoard tag group of the label-free readings


def scalar_tag(key: str) -> str:
    """A history column's TensorBoard tag: ``representation/rankme`` for a label-free reading, else
    ``accuracy/<key>`` (probe, kNN, the kNN over clients' shares, the fine-tunes, the parts' metrics)."""
    return f"{REPRESENTATION if key.startswith(LABEL_FREE) else ACCURACY}/{key}"


class RunLog:
    """The loggers and ``comm.csv`` of a run folder (a no-op off rank 0).

    Args:
        run_dir: the run folder.
        plugins: the round's parts, each logging its own scalars and pictures.
        data: the federation's images (the partition's picture, the final embedding's test images).
        parts: every client's sample indices into ``data.train_x``.
        enabled: whether this process writes (rank 0).
        loggers: the loggers' names (``fedlight.engine.output.loggers.BUILDERS``).
        server_metrics: the history columns of the aggregator's own numbers (``Aggregator.metrics``),
            each logged as the scalar ``server/<name>``.
        evaluator: the run's evaluator, whose last singular-value spectrum and per-client kNN accuracies are
            drawn as histograms after each evaluation (None: no such pictures).
        trainable: the clients that train (None: all); a part outside them is the public client's.
    """

    def __init__(self, run_dir: Path, plugins: list[RoundPlugin], data: ImageData, parts: list[torch.Tensor],
                 enabled: bool = True, loggers: tuple[str, ...] = ("tensorboard",),
                 server_metrics: tuple[str, ...] = (), evaluator: Any = None,
                 trainable: list[int] | None = None) -> None:
        self.run_dir, self.plugins, self.data, self.parts, self.enabled = run_dir, plugins, data, parts, enabled
        self.trainable = range(len(parts)) if trainable is None else trainable  # the others: the public client
        self.evaluator = evaluator
        self.names, self.server_metrics = loggers, server_metrics
        self.loggers: list[Logger] = []  # those open (rank 0, between ``open`` and ``finish``)
        self.logger: TensorBoardLogger | PictureSink | None = None  # the pictures' (the parts draw on it)

    def open(self, rounds_done: int, ledger: list[list], baseline: dict[str, Any] | None,
             history: Sequence[dict[str, Any]] = ()) -> None:
        """Open the logs of a run that has completed ``rounds_done`` rounds (``history``: their rows); a fresh
        run also shows the partition (every client's size, label histogram and domain, also written to
        ``partition.json``) and the ``baseline`` (random-init) accuracies at step 0; a resumed one draws its
        curves against virtual time again (``redraw_time_curves``)."""
        if not self.enabled:
            return
        self.loggers = open_loggers(self.names, self.run_dir, rounds_done)
        self.logger = next((lg for lg in self.loggers if isinstance(lg, TensorBoardLogger)), PictureSink())
        rewrite_csv(self.run_dir / "comm.csv", CommLedger.CSV_HEADER, ledger)
        fresh = rounds_done == 0
        if fresh:  # each client's size, label histogram and domain: a picture, and partition.json for the report
            d = self.data
            public = next((c for c in range(len(self.parts)) if c not in self.trainable), None)
            summary = partition_summary(d.train_y.numpy(), [p.numpy() for p in self.parts], d.num_classes,
                                        None if d.train_domain is None else d.train_domain.numpy(), d.domain_names,
                                        public, None if d.public_y is None else d.public_y.numpy())
            write_summary(summary, self.run_dir)
            self.logger.experiment.add_figure("data/partition", partition_picture(summary), 0)
        for plugin in self.plugins:
            plugin.log_open(self.logger, self.run_dir, fresh)
        redraw_time_curves(self.logger, history)
        if fresh:
            self._log_metrics({scalar_tag(k): v for k, v in baseline.items() if v is not None}, step=0)
            self._reading_pictures(baseline, 0)

    def round(self, row: dict[str, Any], ledger_rows: list[list], reports: list[Report]) -> None:
        """The scalars and pictures of a finished round's history ``row`` and its clients' ``reports``
        (every rank's): the histogram of the answering clients' update norms, the parts' own; its
        ledger rows to comm.csv. Called before the round's checkpoint, and each logger is flushed: once
        the checkpoint holds the round a resume logs only the rounds after it, so events left in
        TensorBoard's buffer (up to 120 s of them) by a kill would be lost for good."""
        if self.logger is None:
            return
        norms = [rep["update_norm"] for rep in reports if rep["status"] == "ok" and rep.get("update_norm") is not None]
        if norms:  # ||payload - global model|| per client (fedlight.server.ops.update_norm)
            self.logger.experiment.add_histogram("clients/update_norm", np.asarray(norms), row["round"])
        for plugin in self.plugins:
            plugin.log_clients(self.logger, row["round"], reports)
        scalars = {"time/round_seconds": row["seconds"], "time/train_seconds": row["train_seconds"],
                   "time/eval_seconds": row["eval_seconds"], "train/lr": row["lr"],
                   **({"train/loss": row["train_loss"]} if row["train_loss"] is not None else {}),
                   **{f"comm/{k}": row[k] for k in ("bytes_up", "bytes_down", "bytes_d2d")},
                   **{scalar_tag(k): v for k, v in row.items() if k.startswith(METRICS + READING_COLUMNS)
                      and v is not None}}
        self._reading_pictures(row, row["round"])
        for plugin in self.plugins:
            scalars.update(plugin.log_round(self.logger, row))
        scalars.update({f"server/{k}": row[k] for k in self.server_metrics if row.get(k) is not None})
        self._log_metrics(scalars, step=row["round"])
        for logger in self.loggers:
            logger.save()
        self.comm(ledger_rows)  # after the flush: a failed append (rewritten at the next start) costs no curve

    def comm(self, ledger_rows: list[list]) -> None:
        """The ledger's new rows at the end of comm.csv (an evaluation's uploads too: LG-FedAvg's new test)."""
        if self.logger is not None:
            append_csv(self.run_dir / "comm.csv", ledger_rows)

    def final(self, record: dict[str, Any], final: dict[str, float | None],
              features: Callable[[torch.Tensor], torch.Tensor], samples: int, step: int) -> None:
        """The run's hyper-parameters (the keys of ``record``, the resolved recipe, that ``run.hparams``
        lists, else those it uses: ``run_hparams``) with its ``final`` metrics at the last round
        (``step``), and the embedding of the first ``samples`` test images by the final global encoder
        (``features``: uint8 images -> (n, d) features)."""
        if self.logger is None:
            return
        part_keys = [key for plugin in self.plugins for key in plugin.option_keys()]
        hparams, finals = run_hparams(record, part_keys), {f"final/{k}": v for k, v in final.items() if v is not None}
        for logger in self.loggers:  # TensorBoard shows the final metrics beside the hparams
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(hparams, metrics=finals, step=step)
            else:
                logger.log_hyperparams(hparams)
                logger.log_metrics(finals, step=step)
        n = min(samples, len(self.data.test_x)) if isinstance(self.logger, TensorBoardLogger) else 0
        if n:
            images = self.data.test_x[:n]
            self.logger.experiment.add_embedding(
                features(images).cpu(), metadata=self.data.test_y[:n].tolist(),
                label_img=images.float().div(255), global_step=step, tag="final_global_encoder")
        self.finish("success")

    def _reading_pictures(self, row: dict[str, Any], step: int) -> None:
        """After an evaluation that measured them: the histograms of the log10 normalised singular values of the
        test embeddings (``representation/log10_spectrum``) and of the clients' kNN accuracies on their own test
        shares (``clients/knn_acc``)."""
        evaluator = self.evaluator
        if evaluator is None or self.logger is None:
            return
        if row.get("rankme", row.get("spectrum_top1")) is not None and evaluator.spectrum is not None:
            spectrum = evaluator.spectrum.clamp_min(1e-12).log10().numpy()
            self.logger.experiment.add_histogram(f"{REPRESENTATION}/log10_spectrum", spectrum, step)
        if row.get("client_knn_acc") is not None and evaluator.client_accuracies:
            self.logger.experiment.add_histogram("clients/knn_acc", np.asarray(evaluator.client_accuracies), step)

    def _log_metrics(self, scalars: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log_metrics(scalars, step=step)

    def finish(self, status: str) -> None:
        """Flush and close the loggers (``success``, ``preempted``, ``failed``)."""
        for logger in self.loggers:
            logger.finalize(status)
        self.loggers = []
