"""Simulated client faults (``faults.*``): dropouts, stragglers, divergence, attackers, and the run's answer.

A client's update diverged when its loss or update holds NaN/Inf or its norm exceeds
``faults.max_update_ratio`` times the round's global model's (``faults.NormBound``).

The draws and the divergence check are ``fedlight.engine.loop.client_faults``; this part applies them in
a round, keeps ``faults.csv`` (round, client, event, detail), adds the round's ``answered``,
``dropped``, ``stragglers`` and ``diverged`` client counts (and ``attackers``, the attackers
that sent, when ``faults.attack`` is set) to the history and TensorBoard, and stops the run
when more clients diverge than ``faults.max_bad_clients``. Who attacks is
``fedlight.engine.loop.client_attacks``'s; what an attacker sends, its attack's
(``fedlight.attacks``): crafted as it uploads, or, for an attack that sees the benign clients'
payloads, once the round's clients have all trained (``revise``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from fedlight.attacks.attack import Attack, AttackContext
from fedlight.engine.loop import client_attacks as attacks, client_faults as faults
from fedlight.engine.loop.comm_ledger import append_csv, rewrite_csv
from fedlight.engine.loop.interfaces import FaultModel, Report, State
from fedlight.engine.output.console import say
from fedlight.engine.state.run_files import CHECKPOINT
from fedlight.errors import RunStopped
from fedlight.seeding import torch_generator
from fedlight.server.aggregator import ClientPayload

COLUMNS = ("answered", "dropped", "stragglers", "diverged")  # per-round client counts in the history


class SimulatedFaults(FaultModel):
    """Faults drawn per (seed, round, client) from ``faults.*``; real divergence is caught too.

    Args:
        options: the faults' probabilities, a straggler's share of work, the diverged clients tolerated.
        seed: run seed.
        run_dir: the run folder (``faults.csv``, and the checkpoint a stop message names).
        rank: this process's rank (rank 0 writes and speaks).
        clients: the federation's trainable client ids (the attackers are a share of them).
        attack: what an attacker sends (``faults.attack``; None: no attack).
        attack_settings: what ``attack`` is built with (``registry.attack_settings``: its name and
            options, defaults included): each attacker's ``faults.csv`` detail.
        lateness: ``(round, client) -> why`` the virtual clock drops a client that its fault would not
            (over-selected, or past the round's deadline: ``engine/parts/clock``), or None.
    """

    def __init__(self, options: faults.FaultOptions, seed: int, run_dir: Path, rank: int = 0,
                 clients: list[int] | None = None, attack: Attack | None = None,
                 attack_settings: dict[str, Any] | None = None,
                 lateness: Callable[[int, int], str | None] | None = None) -> None:
        self.options, self.seed, self.run_dir, self.rank, self.clients = options, seed, run_dir, rank, clients or []
        self.lateness = lateness
        self.attack = attack
        self.needs_payloads = attack is not None and attack.needs_benign
        settings = dict(attack_settings or {"name": options.attack})
        self.detail = " ".join([str(settings.pop("name")),  # an attacker's faults.csv detail: "sign_flip scale=10"
                                *(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in settings.items() if v is not None)])  # unset: its default rule
        self.rows: list[list] = []  # faults.csv: round, client, event, detail
        self.bound: faults.NormBound | None = None  # how far a client's update may go (set each round)
        self.global_state: State = {}  # the round's model (an attacker's update is measured from it)

    def on_round_start(self, round_: int, global_state: State) -> None:
        self.bound = faults.NormBound.of(global_state, self.options.max_update_ratio)
        self.global_state = global_state

    def attackers(self, round_: int) -> frozenset[int]:
        """The clients that attack in ``round_`` (none without ``faults.attack``)."""
        if self.attack is None:
            return frozenset()
        options = self.options
        return attacks.attackers(options.attackers, self.clients, self.seed,
                                 round_ if options.attackers_per_round else None)

    def draw(self, round_: int, client: int) -> faults.ClientFault:
        fault = faults.draw_fault(self.options, self.seed, round_, client)
        late = self.lateness and not fault.dropped and self.lateness(round_, client)
        if late:
            return replace(fault, dropped=True, reason=late)
        if client not in self.attackers(round_):
            return fault
        return replace(fault, attack=attacks.Attacker(round_, client))

    def damage(self, payload: State, fault: faults.ClientFault) -> State:
        if fault.attack is not None and not self.needs_payloads:  # else crafted in ``revise``
            payload = self.attack.craft(payload, self._context(fault.attack.round_, fault.attack.client))
        return faults.poison(payload) if fault.diverge else payload

    def revise(self, round_: int, payloads: list[ClientPayload]) -> list[ClientPayload]:
        """Each attacker's payload crafted from its own and the benign ones (an attack that sees them)."""
        attacking = self.attackers(round_)
        benign = [p.payload for p in payloads if p.client not in attacking]
        count = len(payloads) - len(benign)
        return [p._replace(payload=self.attack.craft(p.payload, self._context(round_, p.client, benign, count)))
                if p.client in attacking else p for p in payloads]

    def _context(self, round_: int, client: int, benign: list[State] | None = None,
                 count: int | None = None) -> AttackContext:
        """What the attacker ``client`` knows of ``round_``: its generator is keyed by (seed, round,
        client), or by (seed, round) for a colluding attack (one generator for every attacker)."""
        keys = ("collusion", round_) if self.attack.colludes else ("attack", round_, client)
        return AttackContext(self.global_state, torch_generator(self.seed, *keys), benign or [], count, round_, client)

    def problem(self, loss: float, payload: State) -> str | None:
        return faults.divergence(loss, payload, self.bound)

    def check(self, round_: int, reports: list[Report], rounds_done: int) -> None:
        """Log this round's faults; stop if more clients diverged than ``faults.max_bad_clients``."""
        rows, attacking = [], self.attackers(round_)
        for rep in reports:
            if rep["status"] == "dropped":
                rows.append([round_ + 1, rep["client"], "dropped", rep.get("detail", "")])
                continue
            if rep["client"] in attacking:
                rows.append([round_ + 1, rep["client"], "attacker", self.detail])
            if rep["work"] < 1:
                rows.append([round_ + 1, rep["client"], "straggler", f"work={rep['work']} steps={rep['steps']}"])
            if rep["status"] == "diverged":
                rows.append([round_ + 1, rep["client"], "diverged", rep["detail"]])
                say(f"round {round_ + 1}: client {rep['client']} diverged ({rep['detail']}); "
                    "excluded from aggregation", self.rank)
        self.rows.extend(rows)
        bad = [rep["client"] for rep in reports if rep["status"] == "diverged"]
        limit = self.options.max_bad_clients
        if limit is None or len(bad) <= limit:
            return
        if self.rank == 0:  # log_round will not run for this round
            append_csv(self.run_dir / "faults.csv", rows)
        kept = (f"the last good checkpoint '{self.run_dir / CHECKPOINT}' (round {rounds_done}) is intact"
                if rounds_done else "no round had completed, so there is no checkpoint")
        raise RunStopped(f"round {round_ + 1}: {len(bad)} clients diverged (NaN/Inf loss or update; clients "
                         f"{', '.join(map(str, bad))}), more than faults.max_bad_clients={limit}; stopped and "
                         f"{kept}; lower local.lr and rerun with --overwrite, or raise faults.max_bad_clients "
                         "and --resume")

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        counts = {"answered": sum(rep["status"] == "ok" for rep in reports),
                  "dropped": sum(rep["status"] == "dropped" for rep in reports),
                  "stragglers": sum(rep["status"] != "dropped" and rep["work"] < 1 for rep in reports),
                  "diverged": sum(rep["status"] == "diverged" for rep in reports)}
        if self.attack is None:
            return counts
        attacking = self.attackers(round_)
        return {**counts, "attackers": sum(rep["status"] != "dropped" and rep["client"] in attacking
                                           for rep in reports)}

    def log_open(self, logger: Any, run_dir: Path, fresh: bool) -> None:
        rewrite_csv(run_dir / "faults.csv", faults.CSV_HEADER, self.rows)

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        append_csv(self.run_dir / "faults.csv", [f for f in self.rows if f[0] == row["round"]])
        return {f"faults/{k}": row[k] for k in (*COLUMNS, "attackers") if k in row}

    def state_dict(self) -> dict[str, Any]:
        return {"faults": self.rows}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        self.rows = [list(row) for row in checkpoint.get("faults", [])]

    def option_keys(self) -> tuple[str, ...]:
        """The divergence check's keys (every run); the fault probabilities when any is set, with
        ``straggler_work`` when stragglers are."""
        options = self.options
        drawn = (("faults.dropout", "faults.straggler", "faults.diverge")
                 if options.dropout or options.straggler or options.diverge else ())
        attack = ("faults.attack", "faults.attackers", "faults.attack_scale", "faults.attackers_per_round",
                  "faults.attack_options")
        return ("faults.max_update_ratio", "faults.max_bad_clients", *drawn,
                *(("faults.straggler_work",) if options.straggler else ()),
                *(attack if self.attack is not None else ()))
