"""What a run has done so far, as its checkpoint holds it (besides its parts' own state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from fedlight.engine.loop.comm_ledger import CommLedger
from fedlight.engine.loop.interfaces import Report, RoundPlugin
from fedlight.engine.loop.provenance import Segment, device_text, ended_now, new_segment, summary
from fedlight.errors import RunStopped, UserError
from fedlight.eval.collapse import first_record
from fedlight.eval.metric_names import is_metric

State = dict[str, torch.Tensor]


@dataclass
class RunState:
    """A run's progress.

    Attributes:
        global_state: the global model's shared tensors.
        rounds_done: rounds completed.
        phase_start: the round the method changed what it shares (LG-FedAvg), if it has.
        history: one row per completed round (results.json's ``history``).
        ledger: every communication so far.
        baseline: the metrics of the model before training (rank 0).
        wall_before: seconds the run had taken before it was resumed.
        partial: a round a preemption stopped between clients: its accumulator, reports and the
            seconds it had run (``seconds``, which the resumed round's ``seconds`` goes on from).
        segments: rank 0's record of each start and resumption of the run (``provenance``).
    """

    global_state: State
    rounds_done: int = 0
    phase_start: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    ledger: CommLedger = field(default_factory=CommLedger)
    baseline: dict[str, float | None] | None = None
    wall_before: float = 0.0
    partial: dict[str, Any] | None = None
    segments: list[Segment] = field(default_factory=list)

    def begin_segment(self, device: torch.device, processes: int, rank: int) -> None:
        """Record (on rank 0) that the run starts or resumes now on ``device`` with ``processes`` ranks."""
        if rank == 0:
            self.segments.append(new_segment(device_text(device), processes))

    def add_round(self, round_: int, reports: list[Report], metrics: dict[str, float | None], ledger_rows: list[list],
                  lr: float, timing: dict[str, float], parts: list[RoundPlugin],
                  server: dict[str, float] | None = None) -> dict[str, Any]:
        """Append (and return) the history row of the (0-based) ``round_`` just trained.

        Args:
            reports: every sampled client's report, by client.
            metrics: the round's evaluation (None values when it was not evaluated).
            ledger_rows: what the round communicated (its clients' and its evaluations' rows).
            lr: the round's local learning rate.
            timing: its wall-clock columns: ``seconds``, the round's time from its start to the end of
                its evaluation (a round a preemption split counts both parts, not the wait between);
                ``train_seconds``, its clients' local training time (``Report["seconds"]``, every part
                of the round) summed and divided by the processes x worker models training side by
                side, so at most about ``seconds``; ``eval_seconds``, its evaluation's.
            parts: the round's parts, each adding its own columns.
            server: the aggregator's own numbers after the round (``Aggregator.metrics``, e.g.
                DP-FedAvg's privacy spent), the row's last columns.
        """
        answered = [rep["loss"] for rep in reports if rep["status"] == "ok"]
        row = {"round": round_ + 1, "train_loss": float(np.mean(answered)) if answered else None, "lr": lr,
               **metrics, **self.ledger.totals(round_, ledger_rows), **timing,
               "clients": [rep["client"] for rep in reports]}
        for part in parts:
            row.update(part.columns(round_, reports, ledger_rows, self.history))
        row.update(server or {})
        self.history.append(row)
        return row

    def last_evaluation(self) -> dict[str, Any] | None:
        """The history row of the last evaluated round (None before any)."""
        evaluated = [row for row in self.history if row["knn_acc"] is not None]
        return evaluated[-1] if evaluated else None

    def to_checkpoint(self, server: dict[str, Any], clients: dict[int, State], parts: dict[str, Any], wall: float,
                      partial: dict[str, Any] | None = None) -> dict[str, Any]:
        """The checkpoint mapping, with the server's, the clients' and the parts' state."""
        return {"rounds_completed": self.rounds_done, "phase_start": self.phase_start,
                "global": {k: v.cpu() for k, v in self.global_state.items()}, "server": server, "clients": clients,
                "history": self.history, "ledger": self.ledger.rows, **parts, "baseline": self.baseline,
                "wall_seconds": wall, "provenance": ended_now(self.segments),
                "partial": partial}  # the unfinished round's accumulator and client reports (or None)

    def results(self, record: dict[str, Any], wall: float, final: dict[str, float | None] | None,
                inputs: dict[str, Any]) -> dict[str, Any]:
        """results.json: the resolved recipe (``record``), the history, the final metrics, the bytes,
        the provenance (its last segment ending now), and ``inputs`` (``Evaluator.inputs``: the images' shape and
        normalisation, so ``fedlight export`` needs no data; outside ``record``, which a resume compares).
        A metric the run does not have (``test_acc`` without a classifier) is left out, not null:
        from ``final`` and ``baseline``, and from the history where no round measured it. ``collapse``: the
        collapse alarm's record (``fedlight.eval.collapse``), None if it never fired."""
        never = {k for row in self.history for k in row if is_metric(k)} - {
            k for row in self.history for k, v in row.items() if v is not None}
        history = [{k: v for k, v in row.items() if k not in never} for row in self.history]
        return {"recipe": record, "rounds_completed": self.rounds_done, "history": history, "final": _measured(final),
                "baseline": _measured(self.baseline), "comm": self.ledger.totals(), "wall_seconds": wall,
                "provenance": summary(ended_now(self.segments)), "inputs": inputs,
                "collapse": first_record(self.history)}

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], to_device: Callable[[torch.Tensor], torch.Tensor], rounds: int,
                        run_dir: Path) -> RunState:
        """The progress a checkpoint of the run in ``run_dir`` holds, its tensors moved by ``to_device``.

        Raises:
            UserError: the checkpoint has completed more than ``rounds`` rounds.
        """
        done = int(ckpt["rounds_completed"])
        if done > rounds:
            raise UserError(f"run folder '{run_dir}' has completed {done} rounds, more than rounds={rounds}; "
                            f"resume with rounds={done} or more, or use --overwrite to start again")
        partial = None
        if ckpt.get("partial"):
            saved = ckpt["partial"]["acc"]  # None when every client before the stop had dropped out
            partial = {**ckpt["partial"], "acc": None if saved is None else {k: to_device(v) for k, v in saved.items()}}
        return cls({k: to_device(v) for k, v in ckpt["global"].items()}, int(ckpt["rounds_completed"]),
                   ckpt.get("phase_start"), list(ckpt["history"]), CommLedger(ckpt["ledger"]), ckpt["baseline"],
                   float(ckpt["wall_seconds"]), partial, list(ckpt.get("provenance", [])))


def evaluation_failed(exc: Exception, checkpoint: Path, rounds_done: int) -> RunStopped:
    """The one line that stops a run whose evaluation failed after its round was saved."""
    cause = (str(exc).strip().splitlines() or [""])[0][:200]
    before = f" and the one before in '{checkpoint}.prev'" if rounds_done > 1 else ""
    return RunStopped(f"round {rounds_done}: evaluating the model failed ({type(exc).__name__}: {cause}); "
                      f"the round is saved in '{checkpoint}'{before}: --resume goes on from it once the cause is "
                      "fixed (e.g. a lower local.lr, or a lower faults.max_update_ratio for a model that exploded)")


def _measured(metrics: dict[str, float | None] | None) -> dict[str, float] | None:
    """``metrics`` without the ones the run does not have (None)."""
    return None if metrics is None else {k: v for k, v in metrics.items() if v is not None}
