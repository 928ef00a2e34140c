"""The round loop: sample -> each client's local work -> aggregate -> evaluate -> log -> checkpoint.

One round reads top to bottom in ``Federation.run_round``: its steps in order, each a call to a
method of this file whose name says what it does (and whose docstring says how).

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

from fedlight.atomic_files import atomic_write_json
from fedlight.data.image_data import ImageData
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
from fedlight.engine.state.run_files import CHECKPOINT, RESULTS
from fedlight.errors import RunStopped
from fedlight.eval.collapse import alarm_line
from fedlight.methods.federated_module import FederatedModule
from fedlight.server.aggregator import Aggregator

TIMING = ("seconds", "train_seconds", "eval_seconds")  # wall-clock columns of the history: never reproducible
TRAINING_STEPS = ("_start_round", "_deal_clients", "_resume_or_begin", "_train_clients", "_collect_reports",
                  "_aggregate")
"""``run_round``'s steps from the round's start to its new global model, in order (what the benchmarks time as
a round's training, before its evaluation, history, checkpoint and logs; ``tests/test_architecture.py`` checks
that ``run_round`` calls them in this order)."""


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
        self.parts, self.trainable, self.options, self.run_dir = parts, trainable, options, run_dir
        self.rank, self.world = fabric.global_rank, fabric.world_size
        self.schedule, self.faults, self.hooks = schedule, faults, [schedule, faults, *plugins]  # hooks: in this order
        self.workers = Workers(module, options.workers, torch.get_num_threads())
        self.clients = ClientRunner(fabric, aggregator, schedule, faults, plugins, [len(p) for p in parts],
                                    self.workers, options, store.open_store(options, run_dir / CHECKPOINT, fabric))
        self.log = RunLog(run_dir, self.hooks, data, parts, enabled=self.rank == 0, loggers=options.loggers,
                          server_metrics=tuple(aggregator.metrics(0)), evaluator=evaluator, trainable=trainable)
        self.checkpoint = RunCheckpoint(fabric, module, aggregator, self.clients, self.hooks, run_dir)
        self.run_state = RunState({k: v.detach().clone() for k, v in module.shared_state().items()})
        self.restored, self.started = False, time.perf_counter()
        self.wall, self.last_eval = 0.0, None  # the run's seconds so far; the last evaluation's history row

    def restore(self) -> None:
        """Continue from the run folder's checkpoint (every rank); ``run`` then trains the rounds left.
        Raises a UserError for no intact checkpoint, or ``rounds`` below the rounds it has completed."""
        prefixes = self.clients.state_prefixes()  # client state that is no model tensor
        self.run_state = self.checkpoint.restore(self.options.rounds, len(self.parts), prefixes)
        self.restored = True

    def run(self) -> dict[str, Any]:
        """Train the rounds left (all unless ``restore`` ran); returns (and on rank 0 writes) the results."""
        state, options, self.started = self.run_state, self.options, time.perf_counter()
        state.begin_segment(self.fabric.device, self.world, self.rank)  # results.json's provenance of this start
        bars = RoundBars(state.rounds_done, options.rounds, self.rank == 0, self.evaluator.options.label_fraction,
                         options.eval_every, self.fabric.device.type == "cpu", resumed=self.restored)
        if not self.restored and self.rank == 0:  # the floor of every metric, the parts' included
            state.baseline = bars.evaluate("the random-init model", floors(self.evaluator, self.hooks,
                                                                           state.global_state))
        self.log.open(state.rounds_done, state.ledger.rows, state.baseline, state.history)
        self.wall, self.last_eval = state.wall_before, state.last_evaluation()
        rounds_before = state.rounds_done
        for round_ in bars:
            self.run_round(round_, bars)
        if self.restored and state.rounds_done == rounds_before:  # nothing left to train: was the last round scored?
            self._evaluate_the_final_model_if_unscored(bars)
        bars.close()
        finals = tuple(prefix for hook in self.hooks for prefix in hook.metric_prefixes)  # the parts' final metrics
        # the last evaluated round's row: its metrics and the columns measured as it trained (the clients' drift)
        results = state.results(options.record, self.wall, final_metrics(state.last_evaluation(), finals),
                                self.evaluator.inputs())
        if self.rank == 0:  # results.json with final metrics says the run is finished: it comes last
            self.log.final(options.record, results["final"], lambda x: self.evaluator.apply(self.module.features, x),
                           options.projector_samples, state.rounds_done)
            atomic_write_json(self.run_dir / RESULTS, results)
        return results

    def _evaluate_the_final_model_if_unscored(self, bars: RoundBars) -> None:
        """A resume with no round left whose last round has no evaluation (it failed, or ``rounds`` was lowered
        to a round that was not due one): evaluate the final model now, into that round's history row and the
        checkpoint, so ``final`` is the final model's and never an earlier round's. Its TensorBoard and CSV rows
        were logged without it; ``final/*`` carries it."""
        state = self.run_state
        if not state.history or state.last_evaluation() is state.history[-1]:  # the checkpoint's: same on every rank
            return
        row = state.history[-1]
        round_ = state.rounds_done - 1
        metrics, uploads, failure, seconds = self._evaluate_if_due(round_, bars)
        self._stop_if_asked(failure, None, False, bars)
        state.ledger.rows.extend(uploads)
        row.update(metrics, eval_seconds=row["eval_seconds"] + seconds,
                   **{k: row[k] + n for k, n in state.ledger.totals(round_, uploads).items()})
        self._save(state)  # every rank (a collective), before rank 0's append can fail
        self.log.comm(uploads)  # comm.csv holds what results.json's comm counts; a failed append is rewritten

    def run_round(self, round_: int, bars: RoundBars) -> None:
        """One round (0-based ``round_``), top to bottom: every step of the loop, in order."""
        started = time.perf_counter() - (self.run_state.partial or {}).get("seconds", 0.0)  # + a resumed round's
        with bars.round(round_) as tick:
            # 1. The round starts: the method may change what it shares, every part hears of it, the lr is set.
            self._start_round(round_)
            # 2. Sample the round's clients (seed, round) and deal this rank's to its worker models.
            per_worker = self._deal_clients(round_)
            # 3. The schedule plans the round; a round a preemption stopped goes on from its saved clients.
            acc, reports, per_worker = self._resume_or_begin(round_, per_worker)
            # 4. Local training: each worker model trains its clients in order, folding their payloads.
            acc, reports = self._train_clients(round_, per_worker, acc, reports, tick, started)
            # 5. Every rank's client reports, by client; the fault model revises payloads, checks divergence.
            acc, reports = self._collect_reports(round_, acc, reports)
            # 6. Aggregate: accumulators summed (or payloads gathered) over ranks -> the new global model.
            self._aggregate(round_, acc, reports)
        # 7. The round is trained: its clients' communication joins the ledger and it counts as done.
        ledger_rows = self._count_round(round_, reports)
        # 8. Evaluate (every eval.every rounds and the last): the parts' evaluations, then probe and kNN.
        metrics, uploads, failure, eval_seconds = self._evaluate_if_due(round_, bars)
        # 9. The round's history row: the loop's columns, the parts' and the server's own, the collapse alarm's.
        row = self._record(round_, reports, metrics, ledger_rows, uploads, started, eval_seconds)
        # 10. The loggers, then the checkpoint (when due, or before a stop), results.json and the progress bar.
        collapsed, preempted = self._collapse_stop(), self._preemption_requested()
        stopping = failure is not None or collapsed is not None or preempted
        self._log_and_save(row, ledger_rows + uploads, reports, bars, self._checkpoint_due(stopping))
        # 11. Stop if the evaluation failed, the encoder collapsed or the run is asked to (its checkpoint is saved).
        self._stop_if_asked(failure, collapsed, preempted, bars)

    def _start_round(self, round_: int) -> None:
        """Step 1: a worker model whose shared / private split changes between rounds is asked first
        (``ChangingSplit.update_split``: LG leaving FedAvg restarts the global state and the clients'
        private states from the current model), then every part's ``on_round_start``, then the round's
        learning rate on every worker model."""
        state = self.run_state
        if any(self.workers.each(lambda m: isinstance(m, ChangingSplit) and m.update_split(round_, state.history))):
            shared_before = set(state.global_state)
            self._set_global(self.module.shared_state())  # the method changed what it shares (LG leaving FedAvg)
            self.clients.split_changed(self.module, self.trainable, shared_before)
            if state.phase_start is None:  # not when a resumed run re-enters the phase it had entered
                state.phase_start = round_
        for hook in self.hooks:
            hook.on_round_start(round_, state.global_state)
        lr = self._lr(round_)
        self.workers.each(lambda m: setattr(m.optim, "lr", lr))

    def _deal_clients(self, round_: int) -> list[list[int]]:
        """Step 2: the round's sampled clients (keyed by seed and round) that this rank trains, one list
        per worker model (``ClientRunner.deal_to_workers``: the parts may change who takes part)."""
        options = self.options
        sampled = [self.trainable[i] for i in sample_clients(options.seed, round_, len(self.trainable),
                                                                 options.fraction, options.poisson)]
        return self.clients.deal_to_workers(sampled, self.module)

    def _resume_or_begin(self, round_: int, per_worker: list[list[int]]) -> tuple[Any, list[Report],
                                                                                   list[list[int]]]:
        """Step 3: the schedule's ``begin_round`` (e.g. a device-to-device schedule plans the period's pulls); then the round's
        accumulator, reports and clients left: a round a preemption stopped between two clients goes on
        from its saved accumulator and reports, else from nothing."""
        state = self.run_state
        self.schedule.begin_round(round_, state.global_state, per_worker[0])
        if state.partial is None:
            return None, [], per_worker
        acc, reports, state.partial = state.partial["acc"], list(state.partial["reports"]), None
        done = {rep["client"] for rep in reports}
        return acc, reports, [[c for c in clients if c not in done] for clients in per_worker]

    def _train_clients(self, round_: int, per_worker: list[list[int]], acc: Any, reports: list[Report],
                       tick: ClientTicks, started: float) -> tuple[Any, list[Report]]:
        """Step 4: every worker model trains its clients side by side (``ClientRunner.train_on_worker``);
        the workers' accumulators merged and this rank's reports. A preemption between two clients saves
        the round so far (``partial``) and stops the run."""
        state = self.run_state
        tick.expect(sum(map(len, per_worker)))
        tick.plan(self.clients.planned_steps(per_worker))
        jobs = [(clients, acc if w == 0 else None) for w, clients in enumerate(per_worker)]  # 0 goes on from a resume
        results = self.workers.map(lambda module, job: self.clients.train_on_worker(
            module, *job, round_, state.global_state, tick), jobs)
        acc = merge_workers(self.aggregator, [worker_acc for worker_acc, _ in results], self.clients.keeps_payloads)
        trained = [rep for _, worker_reports in results for rep in worker_reports]
        reports = reports + trained
        if len(trained) < sum(map(len, per_worker)):  # a preemption stopped the workers between clients
            self.checkpoint.save(state, state.wall_before + time.perf_counter() - self.started, partial={
                "acc": on_cpu(acc), "reports": reports, "seconds": time.perf_counter() - started})
            raise self._preempted(clients_done=len(reports))
        return acc, reports

    def _collect_reports(self, round_: int, acc: Any, reports: list[Report]) -> tuple[Any, list[Report]]:
        """Step 5: every rank's reports, by client; the accumulator as the fault model leaves it
        (``aggregation.revised``: attackers that see the benign payloads); the divergence check."""
        state = self.run_state
        self.module.load_partial(state.global_state)  # server-side training starts from the global model
        reports = sorted((rep for part in gather(self.fabric, reports) for rep in part), key=lambda x: x["client"])
        acc = revised(self.fabric, self.aggregator, self.faults, round_, state.global_state, acc, reports,
                      lambda client, payload: self.clients.on_the_wire(round_, client, payload, state.global_state))
        if reports:  # none: no client sampled, or none due to train (a one-off local budget already spent)
            self.faults.check(round_, reports, self.checkpoint.rounds_saved)
        return acc, reports

    def _aggregate(self, round_: int, acc: Any, reports: list[Report]) -> None:
        """Step 6: the new global model (``aggregation.finish``: the sum over ranks or every payload in
        client order -> ``aggregator.finalize``), into the worker model; kept when no client answered
        (unless the server accounts privacy: its noise and its accountant go on)."""
        if not any(rep["status"] == "ok" for rep in reports) and not self.aggregator.accounts_privacy:
            if reports:
                say(f"round {round_ + 1}: no sampled client answered; the global model is kept", self.rank)
            return
        self._set_global(finish(self.fabric, self.aggregator, self.run_state.global_state, acc,
                                neutral=lambda: self.clients.payload(self.module)))
        self.module.load_partial(self.run_state.global_state)

    def _count_round(self, round_: int, reports: list[Report]) -> list[list]:
        """Step 7: the clients' ledger rows join the run's ledger (returned) and the round counts as done."""
        rows = [row for rep in reports for row in rep["ledger"]]
        self.run_state.ledger.rows.extend(rows)
        self.run_state.rounds_done = round_ + 1
        return rows

    def _evaluate_if_due(self, round_: int, bars: RoundBars) -> tuple[dict[str, float | None], list[list],
                                                                       Exception | None, float]:
        """Step 8: on an evaluation round, the metrics and the ledger rows of what the evaluations
        uploaded (``_evaluate``); the exception if it failed (the trained round is saved before the run
        stops); the seconds it took."""
        state, options = self.run_state, self.options
        metrics, uploads, failure, started = dict.fromkeys(METRICS), [], None, time.perf_counter()
        if state.rounds_done % options.eval_every == 0 or state.rounds_done == options.rounds:
            try:
                metrics, uploads = bars.evaluate(f"round {round_ + 1}", lambda phases: self._evaluate(round_, phases))
                self.last_eval = metrics if self.rank == 0 else self.last_eval
            except Exception as exc:  # the round is trained and aggregated: it is saved first (step 10)
                failure = exc
        return metrics, uploads, failure, time.perf_counter() - started

    def _evaluate(self, round_: int, phases: EvalPhases) -> tuple[dict[str, float | None], list[list]]:
        """The parts' evaluations (collectives, every rank), then probe and kNN (rank 0; ``phases`` is told each
        phase and its work); the metrics and the ledger rows of what the evaluations uploaded."""
        local = self.aggregator.keeps_models_local
        stored = self.clients.gathered() if local or any(hook.needs_clients for hook in self.hooks) else {}
        extra, rows = {}, []
        for hook in self.hooks:  # before the probe, which scores what they leave in the worker model
            found, uploads = hook.evaluate(round_, self.clients.model_states(stored), self.run_state.global_state,
                                           self.run_state.ledger.rows)
            extra.update(found)
            rows += uploads
        if self.rank != 0:
            return dict.fromkeys(METRICS), rows
        models = [stored[c] for c in sorted(stored)] if local else None  # local-only: the clients' own models
        last = self.run_state.rounds_done == self.options.rounds  # the fine-tunes: the final model's only
        return {**self.evaluator.scores(models, self.run_state.global_state, phases, last), **extra}, rows

    def _record(self, round_: int, reports: list[Report], metrics: dict[str, float | None], ledger_rows: list[list],
                uploads: list[list], started: float, eval_seconds: float) -> dict[str, Any]:
        """Step 9: the round's history row (``RunState.add_round``): the loop's columns and timing, every
        part's ``columns()`` and the server's own ``metrics`` (e.g. DP-FedAvg's privacy spent)."""
        state = self.run_state
        state.ledger.rows.extend(uploads)
        timing = {"seconds": time.perf_counter() - started, "eval_seconds": eval_seconds,
                  "train_seconds": sum(r.get("seconds", 0.0) for r in reports) / (self.world * len(self.workers))}
        row = state.add_round(round_, reports, metrics, ledger_rows + uploads, self._lr(round_), timing, self.hooks,
                              self.aggregator.metrics(round_ + 1))
        self._watch_collapse()
        return row

    def _watch_collapse(self) -> None:
        """Step 9 too: when the collapse alarm fires (``fedlight.eval.collapse``; rank 0 reads the metrics), its
        record goes into the round's history row and, unless it stops the run (``_collapse_stop``), its line
        is printed."""
        alarm, state = self.options.collapse, self.run_state
        record = alarm.fires(state.history, self.evaluator.embedding_dim) if self.rank == 0 else None
        if record is not None:
            state.history[-1]["collapse"] = record
            if not self._stops_for_collapse():
                say(alarm_line(record, False), self.rank)

    def _stops_for_collapse(self) -> bool:
        """Whether an alarm that fires now ends the run: ``eval.collapse_stop``, and rounds are left."""
        return self.options.collapse.stop and self.run_state.rounds_done < self.options.rounds

    def _collapse_stop(self) -> dict[str, Any] | None:
        """The alarm's record where it fired this round and stops the run (every rank learns it from rank 0)."""
        if not self._stops_for_collapse():
            return None
        record = self.run_state.history[-1].get("collapse") if self.rank == 0 else None
        return self.fabric.broadcast(record, src=0) if self.world > 1 else record

    def _checkpoint_due(self, stopping: bool) -> bool:
        """Whether this round writes the checkpoint: every ``run.checkpoint_every`` rounds, the last round,
        and a round the run stops after (``stopping``: a failed evaluation, the collapse alarm, a preemption),
        so a stop always resumes from where it stopped. A kill between two checkpoints resumes from the earlier
        one and trains the rounds after it again, bit for bit as a straight run: every draw is keyed by (seed,
        round, client)."""
        done, options = self.run_state.rounds_done, self.options
        return done % options.checkpoint_every == 0 or done == options.rounds or stopping

    def _preemption_requested(self) -> bool:
        """Whether the run is asked to stop (SIGUSR1 / SIGTERM / Ctrl-C on any rank) before its last round."""
        return self.run_state.rounds_done < self.options.rounds and preemption.requested(self.fabric)

    def _log_and_save(self, row: dict[str, Any], ledger_rows: list[list], reports: list[Report],
                      bars: RoundBars, save: bool = True) -> None:
        """Step 10: on rank 0 the loggers (``RunLog.round``), then, when ``save``, the checkpoint (every rank: a
        collective) and results.json without final metrics (the run goes on), then the progress bar's line.
        results.json goes with the checkpoint, so it never holds a round a kill would train again; and a
        run of many short rounds (an asynchronous one's server steps) with sparse checkpoints does not
        rewrite its whole history every round (``BENCHMARKS.md`` section 9).

        The loggers come first: a kill between the two leaves a round logged and not in the checkpoint, which
        the resume drops from TensorBoard, the CSV and MLflow and logs again (the same numbers: a resume is
        bit-exact; an offline W&B run, which nothing trims, then holds the round twice); the other order
        left a round in the checkpoint whose curves no start would ever log. A logger that fails still
        lets the round be saved (and every rank reach the collective) before its error stops the run."""
        state = self.run_state
        try:
            self.log.round(row, ledger_rows, reports)
        except Exception:
            self._save(state)
            raise
        if save:
            self._save(state)
            if self.rank == 0:
                results = state.results(self.options.record, self.wall, None, self.evaluator.inputs())
                atomic_write_json(self.run_dir / RESULTS, results)
        if self.rank == 0:
            bars.show(row, self.last_eval)

    def _save(self, state: RunState) -> None:
        """The checkpoint of ``state`` (every rank: a collective), with the wall time so far."""
        self.wall = state.wall_before + time.perf_counter() - self.started
        self.checkpoint.save(state, self.wall)

    def _stop_if_asked(self, failure: Exception | None, collapsed: dict[str, Any] | None, preempted: bool,
                       bars: RoundBars) -> None:
        """Step 11: the one line of a failed evaluation, of the collapse alarm that stops the run (``collapsed``,
        its record), or a preemption (SIGUSR1/SIGTERM, ``preempted``) before the last round: this round's
        checkpoint is where ``--resume`` starts."""
        if failure is not None:
            bars.close()
            self.log.finish("failed")
            raise evaluation_failed(failure, self.checkpoint.path, self.run_state.rounds_done) from failure
        if collapsed is not None:
            bars.close()
            self.log.finish("failed")
            raise RunStopped(alarm_line(collapsed, True))
        if preempted:
            raise self._preempted()

    def _preempted(self, clients_done: int = 0) -> preemption.Preempted:
        """The exception that stops a preempted run (after its checkpoint); flushes TensorBoard first."""
        self.log.finish("preempted")
        return preemption.Preempted(self.run_state.rounds_done, self.rank, clients_done)

    def _lr(self, round_: int) -> float:
        options = self.options
        return round_lr(options.lr, options.lr_schedule, options.lr_decay, options.rounds, round_,
                        self.run_state.phase_start or 0)

    def _set_global(self, state: State) -> None:
        self.run_state.global_state = {k: v.detach().clone() for k, v in state.items()}
