"""Simulated client faults (``faults.*``): dropouts, stragglers, divergence, and the run's answer.

A client's update diverged when its loss or update holds NaN/Inf or its norm exceeds
``faults.max_update_ratio`` times the round's global model's (``faults.NormBound``).

The draws and the divergence check are ``fedlight.engine.faults``; this part applies them in
a round, keeps ``faults.csv`` (round, client, event, detail), adds the round's ``answered``,
``dropped``, ``stragglers`` and ``diverged`` client counts to the history and TensorBoard,
and stops the run when more clients diverge than ``faults.max_bad_clients``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedlight.engine import faults
from fedlight.engine.console import say
from fedlight.engine.ledger import CommLedger
from fedlight.engine.plugin import FaultModel, Report, State
from fedlight.engine.rundir import CHECKPOINT
from fedlight.errors import RunStopped

COLUMNS = ("answered", "dropped", "stragglers", "diverged")  # per-round client counts in the history


class SimulatedFaults(FaultModel):
    """Faults drawn per (seed, round, client) from ``faults.*``; real divergence is caught too.

    Args:
        options: the faults' probabilities, a straggler's share of work, the diverged clients tolerated.
        seed: run seed.
        run_dir: the run folder (``faults.csv``, and the checkpoint a stop message names).
        rank: this process's rank (rank 0 writes and speaks).
    """

    def __init__(self, options: faults.FaultOptions, seed: int, run_dir: Path, rank: int = 0) -> None:
        self.o, self.seed, self.run_dir, self.rank = options, seed, run_dir, rank
        self.rows: list[list] = []  # faults.csv: round, client, event, detail
        self.bound: faults.NormBound | None = None  # how far a client's update may go (set each round)

    def on_round_start(self, round_: int, global_state: State) -> None:
        self.bound = faults.NormBound.of(global_state, self.o.max_update_ratio)

    def draw(self, round_: int, client: int) -> faults.ClientFault:
        return faults.draw_fault(self.o, self.seed, round_, client)

    def damage(self, payload: State, fault: faults.ClientFault) -> State:
        return faults.poison(payload) if fault.diverge else payload

    def problem(self, loss: float, payload: State) -> str | None:
        return faults.divergence(loss, payload, self.bound)

    def check(self, round_: int, reports: list[Report], rounds_done: int) -> None:
        """Log this round's faults; stop if more clients diverged than ``faults.max_bad_clients``."""
        rows = []
        for rep in reports:
            if rep["status"] == "dropped":
                rows.append([round_ + 1, rep["client"], "dropped", ""])
                continue
            if rep["work"] < 1:
                rows.append([round_ + 1, rep["client"], "straggler", f"work={rep['work']} steps={rep['steps']}"])
            if rep["status"] == "diverged":
                rows.append([round_ + 1, rep["client"], "diverged", rep["detail"]])
                say(f"round {round_ + 1}: client {rep['client']} diverged ({rep['detail']}); "
                    "excluded from aggregation", self.rank)
        self.rows.extend(rows)
        bad = [rep["client"] for rep in reports if rep["status"] == "diverged"]
        limit = self.o.max_bad_clients
        if limit is None or len(bad) <= limit:
            return
        if self.rank == 0:  # log_round will not run for this round
            self._append(rows)
        kept = (f"the last good checkpoint '{self.run_dir / CHECKPOINT}' (round {rounds_done}) is intact"
                if rounds_done else "no round had completed, so there is no checkpoint")
        raise RunStopped(f"round {round_ + 1}: {len(bad)} clients diverged (NaN/Inf loss or update; clients "
                         f"{', '.join(map(str, bad))}), more than faults.max_bad_clients={limit}; stopped and "
                         f"{kept}; lower local.lr and rerun with --overwrite, or raise faults.max_bad_clients "
                         "and --resume")

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"answered": sum(rep["status"] == "ok" for rep in reports),
                "dropped": sum(rep["status"] == "dropped" for rep in reports),
                "stragglers": sum(rep["status"] != "dropped" and rep["work"] < 1 for rep in reports),
                "diverged": sum(rep["status"] == "diverged" for rep in reports)}

    def log_open(self, logger: Any, run_dir: Path, fresh: bool) -> None:
        (run_dir / "faults.csv").write_text(faults.CSV_HEADER + CommLedger.csv_lines(self.rows))

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        self._append([f for f in self.rows if f[0] == row["round"]])
        return {f"faults/{k}": row[k] for k in COLUMNS}

    def _append(self, rows: list[list]) -> None:
        with open(self.run_dir / "faults.csv", "a") as f:
            f.write(CommLedger.csv_lines(rows))

    def state_dict(self) -> dict[str, Any]:
        return {"faults": self.rows}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        self.rows = [list(row) for row in checkpoint.get("faults", [])]

    def option_keys(self) -> tuple[str, ...]:
        """The divergence check's keys (every run); the fault probabilities when any is set, with
        ``straggler_work`` when stragglers are."""
        c = self.o
        drawn = ("faults.dropout", "faults.straggler", "faults.diverge") if c.dropout or c.straggler or c.diverge else ()
        return ("faults.max_update_ratio", "faults.max_bad_clients", *drawn,
                *(("faults.straggler_work",) if c.straggler else ()))
