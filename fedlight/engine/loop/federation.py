"""The round loop: sample -> each client's local work -> aggregate -> evaluate -> log -> checkpoint.

    sample clients -> for each sampled client of this rank (``ClientRunner``, over worker models):
        global shared state + the client's private state -> its schedule's local work -> payload
        folded into the aggregator's accumulator (or kept, for the fault model to revise); private state saved
    -> accumulators summed (or payloads gathered) across ranks -> aggregator.finalize -> new global state
    -> evaluate (the parts' evaluations, then probe and kNN on rank 0) -> log -> checkpoint

It names no paper: a paper's behaviour is a part behind ``fedlight.engine.loop.interfaces``'s interfaces
(a client schedule, a fault model, round plug-ins) whose hooks it calls at each step;
``fedlight.engine.run.assemble`` picks the parts. Every random choice is keyed by (seed, round, client):
1 or N processes or workers, straight or resumed, give the same numbers (up to float summation order).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from fedlight.data.sources import ImageData
from fedlight.engine.loop import client_store as store, preemption
from fedlight.engine.loop.aggregation import finish, merge_workers, on_cpu, revised
from fedlight.engine.loop.client_runner import ClientRunner
from fedlight.engine.loop.evaluator import METRICS, Evaluator, final_metrics
from fedlight.engine.loop.interfaces import ChangingSplit, ClientSchedule, FaultModel, Report, RoundPlugin, State, floors
from fedlight.engine.loop.lr_schedule import round_lr
from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.loop.run_checkpoint import RunCheckpoint
from fedlight.engine.loop.run_log import RunLog
from fedlight.engine.loop.run_state import RunState, evaluation_failed
from fedlight.engine.loop.sampling import sample_clients
from fedlight.engine.loop.workers import Workers
from fedlight.engine.output.console import say
from fedlight.engine.output.progress import ClientTicks, EvalPhases, RoundBars
from fedlight.engine.state.collectives import gather
from fedlight.engine.state.run_files import CHECKPOINT, write_json
from fedlight.methods.federated_module import FederatedModule
from fedlight.server.aggregator import Aggregator

TIMING = ("seconds", "train_seconds", "eval_seconds")  # wall-clock columns of the history: never reproducible


class Federation:
    """One federated simulation on one or more Fabric ranks.

    Args:
        fabric: launched Fabric; module: the worker model (on the device; one per process).
        aggregator: the server; evaluator: probe and kNN of whatever the worker model holds.
        data: the federation's images (the partition's picture, the final embedding).
        parts: one index tensor per client; trainable: the clients that train.
        schedule, faults, plugins: the round's parts; options: the loop's own settings.
        run_dir: the run folder (rank 0 writes).
    """

    def __init__(self, fabric: Fabric, module: FederatedModule, aggregator: Aggregator, evaluator: Evaluator,
                 data: ImageData, parts: list[torch.Tensor], trainable: list[int], schedule: ClientSchedule,
                 faults: FaultModel, plugins: list[RoundPlugin], options: RoundOptions, run_dir: Path) -> None:
        self.fabric, self.module, self.aggregator, self.evaluator = fabric, module, aggregator, evaluator
        self.parts, self.trainable, self.o, self.run_dir = parts, trainable, options, run_dir
        self.rank, self.world = fabric.global_rank, fabric.world_size
        self.schedule, self.faults, self.hooks = schedule, faults, [schedule, faults, *plugins]  # hooks: in this order
        self.workers = Workers(module, options.workers, torch.get_num_threads())
        self.clients = ClientRunner(fabric, aggregator, schedule, faults, plugins, [len(p) for p in parts],
                                    self.workers, options, store.open_store(options, run_dir / CHECKPOINT, fabric))
        self.log = RunLog(run_dir, self.hooks, data, parts, enabled=self.rank == 0, loggers=options.loggers)
        self.checkpoint = RunCheckpoint(fabric, module, aggregator, self.clients, self.hooks, run_dir)
        self.s = RunState({k: v.detach().clone() for k, v in module.shared_state().items()})
        self.restored, self.started = False, time.perf_counter()

    def _lr(self, round_: int) -> float:
        return round_lr(self.o.lr, self.o.lr_schedule, self.o.lr_decay, self.o.rounds, round_, self.s.phase_start or 0)

    def _set_global(self, state: State) -> None:
        self.s.global_state = {k: v.detach().clone() for k, v in state.items()}

    def _train_round(self, round_: int, tick: ClientTicks) -> list[Report]:
        """Train and aggregate one round; returns every rank's client reports, by client."""
        if any(self.workers.each(lambda m: isinstance(m, ChangingSplit) and m.update_split(round_, self.s.history))):
            self._set_global(self.module.shared_state())  # the method changed what it shares (LG leaving FedAvg)
            self.clients.split_changed(self.module, self.trainable)
            if self.s.phase_start is None:  # not when a resumed run re-enters the phase it had entered
                self.s.phase_start = round_
        for hook in self.hooks:
            hook.on_round_start(round_, self.s.global_state)
        lr = self._lr(round_)
        self.workers.each(lambda m: setattr(m.optim, "lr", lr))
        sampled = [self.trainable[i] for i in sample_clients(self.o.seed, round_, len(self.trainable), self.o.fraction,
                                                                 self.o.poisson)]
        hands = self.clients.hands(sampled, self.module)
        self.schedule.begin_round(round_, self.s.global_state, hands[0])
        acc, reports = None, []
        if self.s.partial is not None:  # resuming a round that a preemption stopped between two clients
            acc, reports, self.s.partial = self.s.partial["acc"], list(self.s.partial["reports"]), None
            hands = [[c for c in hand if c not in {rep["client"] for rep in reports}] for hand in hands]
        tick.expect(sum(map(len, hands)))
        tick.plan(self.clients.planned_steps(hands))
        jobs = [(hand, acc if w == 0 else None) for w, hand in enumerate(hands)]  # worker 0 goes on from a resumed sum
        results = self.workers.map(lambda m, job: self.clients.train_hand(m, *job, round_, self.s.global_state, tick),
                                   jobs)
        acc = merge_workers(self.aggregator, [hand_acc for hand_acc, _ in results], self.clients.keeps_payloads)
        trained = [rep for _, hand_reports in results for rep in hand_reports]
        reports += trained
        if len(trained) < sum(map(len, hands)):  # a preemption stopped the workers between clients
            self.checkpoint.save(self.s, self.s.wall_before + time.perf_counter() - self.started, partial={
                "acc": on_cpu(acc), "reports": reports, "seconds": time.perf_counter() - self.t0})
            raise self._preempted(clients_done=len(reports))
        self.module.load_partial(self.s.global_state)  # server-side training starts from the global model
        reports = sorted((rep for part in gather(self.fabric, reports) for rep in part), key=lambda x: x["client"])
        acc = revised(self.fabric, self.aggregator, self.faults, round_, self.s.global_state, acc, reports)
        if reports:  # none: no client sampled, or none due to train (a one-off local budget already spent)
            self.faults.check(round_, reports, self.s.rounds_done)
        if not any(rep["status"] == "ok" for rep in reports) and not self.aggregator.accounts_privacy:
            if reports:
                say(f"round {round_ + 1}: no sampled client answered; the global model is kept", self.rank)
            return reports
        self._set_global(finish(self.fabric, self.aggregator, self.s.global_state, acc,
                                neutral=lambda: self.clients.payload(self.module)))
        self.module.load_partial(self.s.global_state)
        return reports

    def _evaluate(self, round_: int, phases: EvalPhases) -> tuple[dict[str, float | None], list[list]]:
        """The parts' evaluations (collectives, every rank), then probe and kNN (rank 0; ``phases`` is told each
        phase and its work); the metrics and the ledger rows of what the evaluations uploaded."""
        local = self.aggregator.keeps_models_local
        stored = self.clients.gathered() if local or any(hook.needs_clients for hook in self.hooks) else {}
        extra, rows = {}, []
        for hook in self.hooks:  # before the probe, which scores what they leave in the worker model
            found, uploads = hook.evaluate(round_, self.clients.model_states(stored), self.s.global_state,
                                           self.s.ledger.rows)
            extra.update(found)
            rows += uploads
        if self.rank != 0:
            return dict.fromkeys(METRICS), rows
        models = [stored[c] for c in sorted(stored)] if local else None  # local-only: the clients' own models
        return {**self.evaluator.scores(models, self.s.global_state, phases), **extra}, rows

    def _preempted(self, clients_done: int = 0) -> preemption.Preempted:
        """The exception that stops a preempted run (after its checkpoint); flushes TensorBoard first."""
        self.log.finish("preempted")
        return preemption.Preempted(self.s.rounds_done, self.rank, clients_done)

    def restore(self) -> None:
        """Continue from the run folder's checkpoint (every rank); ``run`` then trains the rounds left.
        Raises a UserError for no intact checkpoint, or ``rounds`` below the rounds it has completed."""
        prefixes = tuple(p for p in [self.schedule.state_prefix] if p)  # client state that is no model tensor
        self.s = self.checkpoint.restore(self.o.rounds, len(self.parts), prefixes)
        self.restored = True

    def run(self) -> dict[str, Any]:
        """Train the rounds left (all unless ``restore`` ran); returns (and on rank 0 writes) the results."""
        o, s, self.started = self.o, self.s, time.perf_counter()
        s.begin_segment(self.fabric.device, self.world, self.rank)  # results.json's provenance of this start
        bars = RoundBars(s.rounds_done, o.rounds, self.rank == 0, self.evaluator.o.label_fraction, o.eval_every,
                         self.fabric.device.type == "cpu", resumed=self.restored)
        if not self.restored and self.rank == 0:  # the floor of every metric, the parts' included
            s.baseline = bars.evaluate("the random-init model", floors(self.evaluator, self.hooks, s.global_state))
        self.log.open(s.rounds_done, s.ledger.rows, s.baseline)
        wall, last_eval = s.wall_before, s.last_evaluation()
        for round_ in bars:
            self.t0 = t0 = time.perf_counter() - (s.partial or {}).get("seconds", 0.0)  # + a resumed round's start
            with bars.round(round_) as tick:
                reports = self._train_round(round_, tick)
            rows = [row for rep in reports for row in rep["ledger"]]
            s.ledger.rows.extend(rows)
            s.rounds_done = round_ + 1
            metrics, uploads, failure, t_eval = dict.fromkeys(METRICS), [], None, time.perf_counter()
            if s.rounds_done % o.eval_every == 0 or s.rounds_done == o.rounds:
                try:
                    metrics, uploads = bars.evaluate(f"round {round_ + 1}", lambda phases: self._evaluate(round_, phases))
                    last_eval = metrics if self.rank == 0 else last_eval
                except Exception as exc:  # the round is trained and aggregated: it is saved first (below)
                    failure = exc
            s.ledger.rows.extend(uploads)
            timing = {"seconds": time.perf_counter() - t0, "eval_seconds": time.perf_counter() - t_eval,
                      "train_seconds": sum(r.get("seconds", 0.0) for r in reports) / (self.world * len(self.workers))}
            row = s.add_round(round_, reports, metrics, rows + uploads, self._lr(round_), timing, self.hooks)
            wall = s.wall_before + time.perf_counter() - self.started
            self.checkpoint.save(s, wall)
            self.log.round(row, rows + uploads, reports)
            if self.rank == 0:
                write_json(self.run_dir / "results.json", s.results(o.record, wall, None))
                bars.show(row, last_eval)
            if failure is not None:
                bars.close()
                self.log.finish("failed")
                raise evaluation_failed(failure, self.checkpoint.path, s.rounds_done) from failure
            if s.rounds_done < o.rounds and preemption.requested(self.fabric):  # SIGUSR1/SIGTERM
                raise self._preempted()  # this round's checkpoint above is where --resume starts
        bars.close()
        finals = tuple(prefix for hook in self.hooks for prefix in hook.metric_prefixes)  # the parts' final metrics
        results = s.results(o.record, wall, final_metrics(last_eval, finals))
        if self.rank == 0:  # results.json with final metrics says the run is finished: it comes last
            self.log.final(o.record, results["final"], lambda x: self.evaluator.apply(self.module.features, x),
                           o.projector_samples, s.rounds_done)
            write_json(self.run_dir / "results.json", results)
        return results
