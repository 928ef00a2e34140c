"""The round orchestrator: sample, train (sharded over ranks), aggregate, evaluate, log, save.

A round, as in ARCHITECTURE.md:

    sample clients -> for each sampled client owned by this rank:
        global shared state + the client's private state -> local training -> payload
        folded into the aggregator's accumulator; private state saved
    -> accumulators summed across ranks -> aggregator.finalize -> new global state
    -> evaluate (rank 0) -> log -> checkpoint

A client that keeps state between rounds is always trained by rank ``c % world_size``, so its
private state never moves between processes; stateless clients are dealt to ranks by sample
count. Within a process, ``fabric.workers`` worker models train the rank's clients side by
side (``fedlight.engine.workers``). Every random choice is keyed by (seed, round, client):
1 or N processes or workers, straight or resumed, give the same numbers (up to float
summation order).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from lightning.fabric.loggers import TensorBoardLogger
from tqdm.auto import tqdm

from fedlight.config.schema import Recipe
from fedlight.coreset.buffer import ReplayBuffer
from fedlight.data.partition import class_counts, matching_test_split
from fedlight.data.streams import arrival_batches, segment
from fedlight.data.sources import ImageData
from fedlight.data.views import ViewMaker, ViewParams
from fedlight.engine.checkpoint import load_checkpoint, save_checkpoint
from fedlight.engine import faults
from fedlight.engine.distill import EnsembleDistiller
from fedlight.engine.evaluator import METRICS, Evaluator
from fedlight.engine import preemption, resumable
from fedlight.engine.exchange_rounds import EXCHANGE, ExchangeRounds
from fedlight.engine.ledger import CommLedger
from fedlight.engine.local_test import LOCAL_METRICS, LocalTester
from fedlight.engine.local_loop import LocalResult, steps_per_epoch, train_client
from fedlight.engine.stream_loop import train_client_stream
from fedlight.engine.rundir import CHECKPOINT, write_json
from fedlight.engine.store import ClientStateStore
from fedlight.engine.tensorboard import flatten, partition_figure
from fedlight.engine.workers import Workers, sum_states
from fedlight.errors import RunStopped, UserError
from fedlight.exchange.delay import period_delay
from fedlight.exchange.graph import graph_figure
from fedlight.methods.base import FederatedModule
from fedlight.seeding import numpy_rng, torch_generator
from fedlight.server.base import Aggregator

State = dict[str, torch.Tensor]
BUFFER = "buffer."  # store keys of a streaming client's replay buffer
FAULT_COLUMNS = ("answered", "dropped", "stragglers", "diverged")  # per-round client counts in the history
TIMING = ("seconds", "train_seconds", "eval_seconds")  # wall-clock columns of the history: never reproducible


def clients_per_round(num_clients: int, fraction: float) -> int:
    """``max(1, round(fraction * K))``."""
    return max(1, int(round(fraction * num_clients)))


def sample_clients(seed: int, round_: int, num_clients: int, fraction: float) -> list[int]:
    """The sorted ids of the ``clients_per_round`` clients sampled in ``round_``."""
    m = clients_per_round(num_clients, fraction)
    return sorted(numpy_rng(seed, "sample", round_).choice(num_clients, m, replace=False).tolist())


def deal_clients(sampled: list[int], sizes: list[int], world: int) -> list[list[int]]:
    """Deal a round's sampled clients to ``world`` ranks so each trains about as many samples.

    Largest first, each to the rank with the fewest samples so far (LPT; ties to the lower
    rank and the lower id, so every rank computes the same deal); each rank's list sorted.
    """
    load, hands = [0] * world, [[] for _ in range(world)]
    for size, client in sorted(zip(sizes, sampled), key=lambda x: (-x[0], x[1])):
        rank = min(range(world), key=lambda r: (load[r], r))
        load[rank] += size
        hands[rank].append(client)
    return [sorted(h) for h in hands]


def build_views(recipe: Recipe, data: ImageData) -> ViewMaker:
    """The view maker for recipe section ``views``, normalised with the data's statistics,
    in the memory format ``fabric.channels_last`` gives the model."""
    cfg = recipe.views
    params = ViewParams(**{**asdict(cfg), "blur_p": tuple(cfg.blur_p), "solarize_p": tuple(cfg.solarize_p)})
    return ViewMaker(params, *data.mean_std(), channels_last=recipe.fabric.channels_last)


class Federation:
    """One federated simulation on one or more Fabric ranks.

    Args:
        fabric: launched Fabric (devices, precision, collectives).
        recipe: the resolved recipe.
        data: the federation's images and labels (CPU, uint8).
        parts: one index array per client into ``data.train_x``.
        module: the worker model (one per process).
        aggregator: the server's aggregation strategy.
        run_dir: the run folder (written by rank 0 only).
        on_checkpoint: called on rank 0 after each checkpoint is saved.
    """

    def __init__(self, fabric: Fabric, recipe: Recipe, data: ImageData, parts: list[np.ndarray],
                 module: FederatedModule, aggregator: Aggregator, run_dir: Path,
                 on_checkpoint: Callable[[], None] | None = None) -> None:
        self.fabric, self.recipe, self.data = fabric, recipe, data
        self.rank, self.world = fabric.global_rank, fabric.world_size
        self.module = fabric.to_device(module)  # worker 0: evaluation, checkpoints and the server use it
        declared = {**self.module.shared_state(), **self.module.private_state(), **self.module.transient_state()}
        undeclared = sorted(set(self.module.state_dict()) - set(declared))
        assert not undeclared, f"{type(module).__name__} state not declared shared/private/transient: {undeclared[:3]}"
        self.aggregator = aggregator
        self.run_dir = run_dir
        self.on_checkpoint = on_checkpoint
        self.restored = False
        if aggregator.pools_clients:
            parts = [np.sort(np.concatenate(parts))]
        self.parts = [torch.as_tensor(p, dtype=torch.long) for p in parts]
        self.num_clients = len(self.parts)
        public = recipe.partition.public_client
        self.trainable = [c for c in range(self.num_clients) if c != public]
        self.images = fabric.to_device(data.train_x)
        labels = data.train_y
        if getattr(module, "uses_protected", False):  # fair LG-FedAvg: batches carry (class, attribute)
            labels = torch.stack([data.train_y, data.train_a], dim=1)
        self.labels = fabric.to_device(labels)
        self.views = build_views(recipe, data)
        self.store = ClientStateStore()
        self.ledger = CommLedger()
        self.fault_rows: list[list] = []  # faults.csv: round, client, event, detail
        self.history: list[dict[str, Any]] = []
        self.baseline: dict[str, float] | None = None
        self.rounds_done = 0
        self.phase_start: int | None = None  # the round the method changed what it shares (LG), if it has
        self.wall_before = 0.0
        self.partial: dict[str, Any] | None = None  # a round a preemption stopped between clients
        self.norm_bound: faults.NormBound | None = None  # how far a client's update may go (set each round)
        self.started = time.perf_counter()
        self.global_state = self._snapshot(self.module.shared_state())
        self.evaluator = Evaluator(fabric, self.module, data, self.views, recipe.eval, recipe.seed)
        self.local_tester: LocalTester | None = None
        if recipe.eval.local_test:
            train = [parts[c] for c in self.trainable]
            test = matching_test_split(data.train_y.numpy(), train, data.test_y.numpy(),
                                       numpy_rng(recipe.seed, "local-test"))
            self.local_tester = LocalTester(self.evaluator, train, test, [float(len(p)) for p in train])
        self.logger: TensorBoardLogger | None = None
        self.distiller: EnsembleDistiller | None = None
        if aggregator.uses_public_set:  # FLESD: public client's images, never trained on
            self.public_images = self.images[self.parts[public].to(self.images.device)]
            self.distiller = EnsembleDistiller(fabric, self.module, self.public_images, self.views, recipe.seed)
            aggregator.bind_distiller(self.distiller)
        self.exchange: ExchangeRounds | None = None
        if aggregator.aggregate_every is not None:  # CF-CL: rounds of Ta SGD iterations, D2D exchange
            self.exchange = ExchangeRounds(fabric, recipe, self.module, self.images, self.parts, self.views,
                                           aggregator.aggregate_every,
                                           [c for c in self.trainable if c % self.world == self.rank])
        self.workers = Workers(self.module, recipe.fabric.workers, torch.get_num_threads())

    # ---------------------------------------------------------------- collectives
    @staticmethod
    def _snapshot(state: State) -> State:
        return {k: v.detach().clone() for k, v in state.items()}

    def _sum_across_ranks(self, acc: State) -> State:
        if self.world == 1:
            return acc
        keys = sorted(acc)
        flat = torch.cat([acc[k].reshape(-1).to(self.fabric.device) for k in keys])
        flat = self.fabric.all_reduce(flat, reduce_op="sum")
        out, offset = {}, 0
        for k in keys:
            n = acc[k].numel()
            out[k] = flat[offset:offset + n].view_as(acc[k]).to(acc[k].device)
            offset += n
        return out

    def _gather(self, obj: Any) -> list[Any]:
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    # ---------------------------------------------------------------- one round
    def _round_lr(self, round_: int) -> float:
        """``local.lr`` in (0-based) ``round_`` under ``local.lr_schedule``.

        The schedule counts t rounds from the start of the method's current phase, ``phase_start``
        (0, or the round LG-FedAvg left its FedAvg phase: the paper's LG runs start from a FedAvg
        checkpoint at the initial learning rate, and its Table 6 lists the decay of each run):

        * ``constant``: ``lr``;
        * ``cosine``: ``lr / 2 * (1 + cos(pi t / T))`` over the phase's T rounds (FedU / FedEMA);
        * ``exponential``: ``lr * (1 - lr_decay)^t``: LG-FedAvg's Table 6 "learning rate decay
          0.005" (CIFAR-10) read as its authors' code applies ``lr_decay``, a factor per round
          (``lr *= 0.995`` after every round).
        """
        l, start = self.recipe.local, self.phase_start or 0
        t = round_ - start
        if l.lr_schedule == "cosine":
            return l.lr * 0.5 * (1 + math.cos(math.pi * t / max(self.recipe.rounds - start, 1)))
        if l.lr_schedule == "exponential":
            return l.lr * (1 - l.lr_decay) ** t
        return l.lr

    def _train_round(self, round_: int, progress: Any) -> list[dict[str, Any]]:
        r = self.recipe
        if self.distiller is not None:  # FLESD: the round's ESD (if any client answers) counts its steps
            self.distiller.round, self.distiller.steps = round_, 0
        if any(self.workers.each(lambda m: m.on_round_start(round_, self.history))):  # e.g. LG leaving FedAvg
            self._split_changed()
            if self.phase_start is None:  # not when a resumed run re-enters the phase it had entered
                self.phase_start = round_
        lr = self._round_lr(round_)
        self.workers.each(lambda m: setattr(m.optim, "lr", lr))
        sampled = [self.trainable[i] for i in sample_clients(r.seed, round_, len(self.trainable), r.clients.fraction)]
        self.norm_bound = faults.NormBound.of(self.global_state, r.faults.max_update_ratio)  # this round's
        hands = self._hands(sampled)
        if self.exchange is not None:
            self.exchange.begin_round(round_, self.global_state, hands[0])
        acc: State | None = None
        reports = []
        if self.partial is not None:  # resuming a round that a preemption stopped between two clients
            acc, reports = self.partial["acc"], list(self.partial["reports"])
            done = {rep["client"] for rep in reports}
            hands = [[c for c in hand if c not in done] for hand in hands]
            self.partial = None
        jobs = [(hand, acc if w == 0 else None) for w, hand in enumerate(hands)]  # worker 0 goes on from a resumed sum
        hand_results = self.workers.map(lambda module, job: self._train_hand(module, *job, round_, progress), jobs)
        acc = sum_states([hand_acc for hand_acc, _ in hand_results])
        trained = [rep for _, hand_reports in hand_results for rep in hand_reports]
        reports += trained
        if len(trained) < sum(map(len, hands)):  # a preemption stopped the workers between clients
            self._checkpoint(self.wall_before + time.perf_counter() - self.started, partial={
                "acc": None if acc is None else {k: v.cpu() for k, v in acc.items()}, "reports": reports})
            raise self._preempted(clients_done=len(reports))
        self.module.load_partial(self.global_state)  # server-side training (FLESD) starts from the global model
        reports = sorted((rep for reports_ in self._gather(reports) for rep in reports_), key=lambda x: x["client"])
        if not reports:  # no sampled client was due to train (a one-off local budget already spent)
            return reports
        self._check_faults(round_, reports)
        if not any(rep["status"] == "ok" for rep in reports):
            self._say(f"round {round_ + 1}: no sampled client answered; the global model is kept")
            return reports
        if acc is None:  # this rank trained nobody: a neutral element keeps the collective aligned
            acc = self.aggregator.zeros(self._client_payload(self.module))
        acc = self._sum_across_ranks(acc)
        self.global_state = self._snapshot(self.aggregator.finalize(self.global_state, acc))
        self.module.load_partial(self.global_state)
        return reports

    def _train_hand(self, module: FederatedModule, hand: list[int], acc: State | None, round_: int,
                    progress: Any) -> tuple[State | None, list[dict[str, Any]]]:
        """Train the clients of one worker's ``hand`` in order on ``module``, folding their payloads
        into ``acc``; returns it and their reports. In a one-process run a preemption stops it
        between two clients."""
        reports = []
        for i, client in enumerate(hand):
            fault = faults.draw_fault(self.recipe.faults, self.recipe.seed, round_, client)
            ledger = CommLedger()
            if self.aggregator.communicates:
                ledger.record(round_, client, "down", self.global_state)
            report = {"client": client, "status": "ok", "work": fault.work, "ledger": ledger.rows}
            reports.append(report)
            if progress is not None:
                progress.update(1)
            if fault.dropped:  # fails before sending: nothing trained, nothing sent, private state kept
                report.update(status="dropped", loss=None, steps=0, samples=0)
            else:
                acc = self._train_one(module, client, round_, fault, acc, ledger, report)
            if self.world == 1 and i + 1 < len(hand) and preemption.received():  # stop between clients
                break
        return acc, reports

    def _train_one(self, module: FederatedModule, client: int, round_: int, fault: faults.ClientFault,
                   acc: State | None, ledger: CommLedger, report: dict[str, Any]) -> State | None:
        """Train one answering client on ``module``, fill its ``report`` and fold its payload into
        ``acc`` unless its loss or update is NaN/Inf (then its private state is not saved either)."""
        module.load_partial(self.global_state)
        private = self.store.get(client) or {}
        module_state = {k: v for k, v in private.items() if not k.startswith((BUFFER, EXCHANGE))}
        if module_state:
            module.load_partial(module_state)
        else:
            module.reset_private_state()
        started = time.perf_counter()
        result, weight, extra = self._local_work(module, client, round_, private, fault.work)
        report["seconds"] = time.perf_counter() - started
        payload = self._client_payload(module)
        if fault.diverge:
            payload = faults.poison(payload)
        buffer_state = extra.pop("buffer_state", {})
        if self.aggregator.communicates:
            ledger.record(round_, client, "up", payload)
        if extra.get("d2d_bytes"):  # CF-CL: images received over D2D links, 8 bits per pixel
            ledger.rows.append([round_, client, "d2d", "uint8", extra.pop("d2d_bytes")])
        report.update(loss=result.mean_loss, steps=result.steps, samples=int(weight), **extra)
        problem = faults.divergence(result.mean_loss, payload, self.norm_bound)
        if problem:  # excluded; its private state is not saved
            report.update(status="diverged", detail=problem)
            return acc
        self.store.put(client, {**self._persistent_state(module), **buffer_state})
        return self.aggregator.accumulate(acc, payload, weight)

    def _say(self, message: str) -> None:
        """One line on stderr (rank 0), clear of the progress bars."""
        if self.rank == 0:
            tqdm.write(f"fedlight: {message}", file=sys.stderr)

    def _check_faults(self, round_: int, reports: list[dict[str, Any]]) -> None:
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
                self._say(f"round {round_ + 1}: client {rep['client']} diverged ({rep['detail']}); "
                          "excluded from aggregation")
        self.fault_rows.extend(rows)
        bad = [rep["client"] for rep in reports if rep["status"] == "diverged"]
        limit = self.recipe.faults.max_bad_clients
        if limit is None or len(bad) <= limit:
            return
        if self.rank == 0:
            with open(self.run_dir / "faults.csv", "a") as f:
                f.write(CommLedger.csv_lines(rows))
        kept = (f"the last good checkpoint '{self.run_dir / CHECKPOINT}' (round {self.rounds_done}) is intact"
                if self.rounds_done else "no round had completed, so there is no checkpoint")
        raise RunStopped(f"round {round_ + 1}: {len(bad)} clients diverged (NaN/Inf loss or update; clients "
                         f"{', '.join(map(str, bad))}), more than faults.max_bad_clients={limit}; stopped and "
                         f"{kept}; lower local.lr and rerun with --overwrite, or raise faults.max_bad_clients "
                         "and --resume")

    def _split_changed(self) -> None:
        """The method changed what it shares: the global state becomes the new shared state, and every
        client of this rank starts its new private state from the current model (stored state wins)."""
        self.global_state = self._snapshot(self.module.shared_state())
        for client in self.trainable:
            if client % self.world == self.rank:
                self.store.put(client, {**self.module.private_state(), **(self.store.get(client) or {})})

    def _hands(self, sampled: list[int]) -> list[list[int]]:
        """The sampled clients this rank trains, one list per worker. Where clients keep state between
        rounds it lives on rank ``client % world``, so they train there; stateless clients are dealt
        to every worker of every rank by sample count, so none waits long for another (cross-silo,
        2 processes: 13.6% -> 1.8% of a round)."""
        stateful = (self.module.private_state() or self.aggregator.keeps_models_local
                    or self.recipe.stream.velocity is not None or self.exchange is not None)
        size = lambda clients: [len(self.parts[c]) for c in clients]
        w = len(self.workers)
        if stateful:
            mine = [c for c in sampled if c % self.world == self.rank and self._due(c)]
            return deal_clients(mine, size(mine), w)
        return deal_clients(sampled, size(sampled), self.world * w)[self.rank * w:(self.rank + 1) * w]

    def _due(self, client: int) -> bool:
        """Whether a sampled ``client`` trains: always, except under a one-off local budget
        (``trains_once``, SOLO's ``server.budget=once``) once it holds a model of its own."""
        return not (self.aggregator.trains_once and self.store.get(client) is not None)

    def _local_work(self, module: FederatedModule, client: int, round_: int, private: State,
                    work: float = 1.0) -> tuple[LocalResult, float, dict[str, Any]]:
        """Train ``client`` for one round: E epochs on its data, or its stream through its buffer.

        Returns the local result, the client's aggregation weight (its sample count, or the
        samples that streamed in this round) and, for streams, buffer statistics and state.
        A straggler (``work`` < 1) stops after that share of its optimizer steps.
        """
        r = self.recipe
        generator = torch_generator(r.seed, "local", round_, client)
        if self.exchange is not None:
            result, weight, extra = self.exchange.train(client, round_, generator, private)
            labels = self.data.train_y.numpy()  # measurement only (CF-CL Fig. 3c): training never sees them
            extra["label_counts"] = class_counts(labels, extra.pop("sets"), self.data.num_classes).tolist()
            return result, weight, extra
        if r.stream.velocity is None:
            n = len(self.parts[client])
            max_steps = faults.steps_done(r.local.epochs * steps_per_epoch(n, r.local.batch_size), work)
            result = train_client(self.fabric, module, self.images, self.labels,
                                  self.parts[client].to(self.images.device), self.views, r.local.epochs,
                                  r.local.batch_size, generator, max_steps=max_steps)
            return result, float(n), {}
        saved = {k[len(BUFFER):]: v for k, v in private.items() if k.startswith(BUFFER)}
        buffer = ReplayBuffer.from_state(r.buffer.size, saved) if saved else ReplayBuffer(r.buffer.size)
        labels = self.data.train_y.numpy()
        samples = segment(labels, self.parts[client].numpy(), r.stream.stc,
                          lambda p: numpy_rng(r.seed, "stream", client, p), round_, r.stream.velocity)
        arrivals = [torch.as_tensor(b) for b in arrival_batches(samples, r.buffer.size)]
        if work < 1:  # a straggler: the first arrivals only
            arrivals = arrivals[:faults.steps_done(len(arrivals), work)]
            samples = samples[:sum(len(a) for a in arrivals)]
        result, stats = train_client_stream(self.fabric, module, self.images, self.labels, arrivals, buffer,
                                            r.buffer, self.views, generator)
        return result, float(len(samples)), {
            "buffer": vars(stats),
            "buffer_classes": np.bincount(labels[buffer.ids.numpy()], minlength=self.data.num_classes).tolist(),
            "buffer_state": {BUFFER + k: v for k, v in buffer.state_dict().items()},
        }

    def _client_payload(self, module: FederatedModule) -> State:
        """What the client ``module`` just trained uploads: its payload, or a message about the public set."""
        if self.aggregator.uses_public_set:  # one worker (fit.check_recipe): the evaluator's module
            return self.aggregator.client_message(self.evaluator.apply(module.embed, self.public_images))
        return module.payload()

    def _persistent_state(self, module: FederatedModule) -> State:
        """What the store keeps for a client: its private state (and its whole model for local-only)."""
        state = module.private_state()
        return {**module.shared_state(), **state} if self.aggregator.keeps_models_local else state

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, client_models: list[State] | None = None) -> dict[str, float | None]:
        """Accuracies of the global model, or mean and spread over ``client_models`` (local-only)."""
        if client_models is None:
            return self.evaluator.model_metrics()
        return self.evaluator.clients_metrics(client_models, self.global_state)

    def _local_test(self, round_: int) -> tuple[dict[str, float | None], list[list]]:
        """LG-FedAvg's local / new test over every client's model (a collective; metrics on rank 0).

        Also returns the ledger rows of the new test's upload of every client's local model
        (direction ``new_test``; section 3.1, footnote: sent "only once after training"), on every
        rank: charged once per run, in the round of the first evaluation, whose byte count every
        later one shares (the models' sizes never change), so a run grown by ``--resume`` is not
        charged twice and its ledger matches a straight run's.
        """
        if self.local_tester is None:
            return {}, []
        shards = self._gather(self.store.state_dict())
        states = {c: s for shard in shards for c, s in shard.items()}
        private = {c: {k: v for k, v in states.get(c, {}).items() if not k.startswith(BUFFER)} for c in self.trainable}
        uploads = CommLedger()
        if not any(row[2] == "new_test" for row in self.ledger.rows):
            for c in self.trainable:
                uploads.record(round_, c, "new_test", self.local_tester.upload(private[c]))
        if self.rank != 0:
            return {}, uploads.rows
        models = [{**self.global_state, **{k: self.fabric.to_device(v) for k, v in private[c].items()}}
                  for c in self.trainable]
        return self.local_tester.metrics(models), uploads.rows  # leaves the worker holding the averaged model

    def _client_models(self) -> list[State] | None:
        """Every trained client's model, gathered on all ranks (local-only training), else None."""
        if not self.aggregator.keeps_models_local:
            return None
        shards = self._gather(self.store.state_dict())
        states = {c: s for shard in shards for c, s in shard.items()}
        return [{k: self.fabric.to_device(v) for k, v in states[c].items()} for c in sorted(states)]

    # ---------------------------------------------------------------- persistence
    def _checkpoint(self, wall: float, partial: dict[str, Any] | None = None) -> None:
        shards = self._gather(self.store.state_dict())
        if self.rank != 0:
            return
        clients = {c: s for shard in shards for c, s in shard.items()}
        save_checkpoint(self.run_dir / CHECKPOINT, {
            "rounds_completed": self.rounds_done,
            "phase_start": self.phase_start,
            "global": {k: v.cpu() for k, v in self.global_state.items()},
            "server": self.aggregator.state_dict(),
            "clients": clients,
            "history": self.history,
            "ledger": self.ledger.rows,
            "faults": self.fault_rows,
            "baseline": self.baseline,
            "wall_seconds": wall,
            "partial": partial,  # the unfinished round's accumulator and client reports (or None)
        })
        if self.on_checkpoint is not None:
            self.on_checkpoint()

    def _evaluation_failed(self, exc: Exception) -> RunStopped:
        """The one line that stops a run whose evaluation failed after its round was saved;
        flushes TensorBoard first."""
        if self.logger is not None:
            self.logger.finalize("failed")
        cause = (str(exc).strip().splitlines() or [""])[0][:200]
        ckpt = self.run_dir / CHECKPOINT
        before = f" and the one before in '{ckpt}.prev'" if self.rounds_done > 1 else ""
        return RunStopped(f"round {self.rounds_done}: evaluating the model failed ({type(exc).__name__}: {cause}); "
                          f"the round is saved in '{ckpt}'{before}: --resume goes on from it once the cause is "
                          "fixed (e.g. a lower local.lr, or a lower faults.max_update_ratio for a model that exploded)")

    def _preempted(self, clients_done: int = 0) -> preemption.Preempted:
        """The exception that stops a preempted run (after its checkpoint); flushes TensorBoard first."""
        if self.logger is not None:
            self.logger.finalize("preempted")
        return preemption.Preempted(self.rounds_done, self.rank, clients_done)

    def _unresumable(self, ckpt: dict[str, Any]) -> str | None:
        """What makes a loaded checkpoint one this run cannot resume from (``resumable``), or None."""
        return resumable.problem(ckpt, self.module.state_dict(), self.num_clients, (BUFFER, EXCHANGE))

    def restore(self) -> None:
        """Continue from the run folder's checkpoint (every rank); ``run`` then trains the rounds left.

        Raises:
            UserError: no intact checkpoint, or ``rounds`` below the rounds it has completed.
        """
        ckpt = load_checkpoint(self.run_dir / CHECKPOINT, check=self._unresumable)
        self.rounds_done = int(ckpt["rounds_completed"])
        if self.rounds_done > self.recipe.rounds:
            raise UserError(f"run folder '{self.run_dir}' has completed {self.rounds_done} rounds, more than "
                            f"rounds={self.recipe.rounds}; resume with rounds={self.rounds_done} or more, "
                            "or use --overwrite to start again")
        self.phase_start = ckpt.get("phase_start")
        self.global_state = {k: self.fabric.to_device(v) for k, v in ckpt["global"].items()}
        self.module.load_partial(self.global_state)
        self.aggregator.load_state_dict(ckpt["server"])
        self.store.load_state_dict(ckpt["clients"], keep=lambda c: c % self.world == self.rank)
        self.history = list(ckpt["history"])
        self.ledger = CommLedger(ckpt["ledger"])
        self.fault_rows = [list(row) for row in ckpt.get("faults", [])]
        self.baseline = ckpt["baseline"]
        self.wall_before = float(ckpt["wall_seconds"])
        if ckpt.get("partial"):
            saved = ckpt["partial"]["acc"]  # None when every client before the stop had dropped out
            acc = None if saved is None else {k: self.fabric.to_device(v) for k, v in saved.items()}
            self.partial = {**ckpt["partial"], "acc": acc}
        self.restored = True

    def _results(self, wall: float, final: dict[str, float] | None) -> dict[str, Any]:
        return {
            "recipe": asdict(self.recipe),
            "rounds_completed": self.rounds_done,
            "history": self.history,
            "final": final,
            "baseline": self.baseline,
            "comm": self.ledger.totals(),
            "wall_seconds": wall,
        }

    # ---------------------------------------------------------------- logging
    def _open_logger(self) -> None:
        if self.rank != 0:
            return
        # purge_step drops events a killed run logged after its last checkpoint
        self.logger = TensorBoardLogger(str(self.run_dir), name="tensorboard", version="",
                                        default_hp_metric=False, purge_step=self.rounds_done + 1)
        (self.run_dir / "comm.csv").write_text(CommLedger.CSV_HEADER + CommLedger.csv_lines(self.ledger.rows))
        (self.run_dir / "faults.csv").write_text(faults.CSV_HEADER + CommLedger.csv_lines(self.fault_rows))
        if self.rounds_done == 0:
            counts = class_counts(self.data.train_y.numpy(), [p.numpy() for p in self.parts], self.data.num_classes)
            self.logger.experiment.add_figure("data/partition", partition_figure(counts), 0)
            if self.exchange is not None:
                ex = self.exchange
                write_json(self.run_dir / "graph.json", {
                    "kind": self.recipe.exchange.graph, "neighbours": ex.exchange.neighbours,
                    "positions": ex.positions.tolist()})
                self.logger.experiment.add_figure("exchange/graph", graph_figure(ex.adjacency, ex.positions), 0)
            self.logger.log_metrics({f"baseline/{k}": v for k, v in self.baseline.items() if v is not None}, step=0)

    @staticmethod
    def _buffer_summary(reports: list[dict[str, Any]]) -> dict[str, Any]:
        """Streaming rounds: share of new samples dropped at once, share of buffered samples re-scored,
        milliseconds of buffer selection per arriving batch."""
        if not reports or "buffer" not in reports[0]:
            return {}
        total = {k: sum(rep["buffer"][k] for rep in reports) for k in reports[0]["buffer"]}
        return {"buffer_dropped_new": total["dropped_new"] / max(total["new"], 1),
                "buffer_rescored": total["rescored"] / max(total["buffered"], 1),
                "buffer_select_ms": 1000 * total["seconds"] / max(total["batches"], 1),
                "buffer_classes": [rep["buffer_classes"] for rep in reports]}

    def _exchange_summary(self, reports: list[dict[str, Any]], rows: list[list]) -> dict[str, Any]:
        """CF-CL rounds: iterations so far, variance across devices of their training sets' label
        counts (mean over classes and over the period's pulls, Fig. 3c) and the cumulative delay."""
        if self.exchange is None or not reports:
            return {}
        pulls = min(len(rep["label_counts"]) for rep in reports)
        counts = np.array([[rep["label_counts"][p] for rep in reports] for p in range(pulls)], dtype=float)
        before = self.history[-1]["delay_seconds"] if self.history else 0.0
        delay = period_delay(rows, {rep["client"]: rep["exchange_seconds"] for rep in reports})
        return {"iterations": self.rounds_done * self.exchange.aggregate_every,
                "label_var": float(counts.var(axis=1).mean()), "delay_seconds": before + delay}

    def _log_round(self, row: dict[str, Any], rows: list[list]) -> None:
        if self.logger is None:
            return
        scalars = {"time/round_seconds": row["seconds"], "time/train_seconds": row["train_seconds"],
                   "time/eval_seconds": row["eval_seconds"], "train/lr": row["lr"],
                   **({"train/loss": row["train_loss"]} if row["train_loss"] is not None else {}),
                   **{f"faults/{k}": row[k] for k in FAULT_COLUMNS},
                   **{f"comm/{k}": row[k] for k in ("bytes_up", "bytes_down", "bytes_d2d")},
                   **({"comm/bytes_new_test": row["bytes_new_test"]} if self.local_tester is not None else {}),
                   **{f"eval/{k}": v for k, v in row.items()
                      if k.startswith(METRICS + LOCAL_METRICS) and v is not None}}
        if "esd_steps" in row:  # FLESD: optimizer steps of the round's server-side distillation
            scalars["server/esd_steps"] = row["esd_steps"]
        if "label_var" in row:
            scalars.update({"exchange/label_var": row["label_var"], "exchange/delay_seconds": row["delay_seconds"]})
        if "buffer_classes" in row:
            scalars.update({"stream/dropped_new": row["buffer_dropped_new"], "stream/rescored": row["buffer_rescored"],
                            "stream/select_ms_per_batch": row["buffer_select_ms"]})
            self.logger.experiment.add_figure(
                "stream/buffer_classes", partition_figure(np.array(row["buffer_classes"]), "buffer classes"),
                row["round"])
        self.logger.log_metrics(scalars, step=row["round"])
        with open(self.run_dir / "comm.csv", "a") as f:
            f.write(CommLedger.csv_lines(rows))
        with open(self.run_dir / "faults.csv", "a") as f:
            f.write(CommLedger.csv_lines([f for f in self.fault_rows if f[0] == row["round"]]))

    @staticmethod
    def _fault_counts(reports: list[dict[str, Any]]) -> dict[str, int]:
        """The round's ``answered``, ``dropped``, ``stragglers`` and ``diverged`` client counts."""
        return {"answered": sum(rep["status"] == "ok" for rep in reports),
                "dropped": sum(rep["status"] == "dropped" for rep in reports),
                "stragglers": sum(rep["status"] != "dropped" and rep["work"] < 1 for rep in reports),
                "diverged": sum(rep["status"] == "diverged" for rep in reports)}

    def _log_final(self, final: dict[str, float]) -> None:
        if self.logger is None:
            return
        self.logger.log_hyperparams(flatten(asdict(self.recipe)),
                                    metrics={f"final/{k}": v for k, v in final.items() if v is not None})
        n = min(self.recipe.eval.projector_samples, len(self.data.test_x))
        if n:
            images = self.data.test_x[:n]
            self.logger.experiment.add_embedding(
                self.evaluator.apply(self.module.features, images).cpu(), metadata=self.data.test_y[:n].tolist(),
                label_img=images.float().div(255), global_step=self.rounds_done, tag="final_global_encoder")
        self.logger.finalize("success")

    # ---------------------------------------------------------------- the run
    def run(self) -> dict[str, Any]:
        """Train the rounds left (all unless ``restore`` ran); returns (and on rank 0 writes) the results."""
        r = self.recipe
        start = self.started = time.perf_counter()
        if not self.restored and self.rank == 0:
            self.baseline = self.evaluate()
        self._open_logger()
        wall = self.wall_before
        evaluated = [row for row in self.history if row["knn_acc"] is not None]
        last_eval = evaluated[-1] if evaluated else None
        rounds = tqdm(range(self.rounds_done, r.rounds), initial=self.rounds_done, total=r.rounds,
                      desc="rounds", disable=self.rank != 0, dynamic_ncols=True)
        for round_ in rounds:
            t0 = time.perf_counter()
            clients_bar = tqdm(total=clients_per_round(len(self.trainable), r.clients.fraction), desc=f"round {round_ + 1} clients", leave=False,
                               disable=self.rank != 0, dynamic_ncols=True)
            try:
                reports = self._train_round(round_, clients_bar)
            finally:  # a stopped run's last line is its message, not a progress bar
                clients_bar.close()
                if sys.exc_info()[0] is not None:
                    rounds.close()
            rows = [row for rep in reports for row in rep["ledger"]]
            self.ledger.rows.extend(rows)
            self.rounds_done = round_ + 1
            metrics: dict[str, float | None] = dict.fromkeys(METRICS)
            t_eval = time.perf_counter()
            eval_failure: Exception | None = None
            if self.rounds_done % r.eval.every == 0 or self.rounds_done == r.rounds:
                client_models = self._client_models()  # a collective: every rank takes part
                try:  # a collective too; before evaluate(), which then scores the average
                    local, uploads = self._local_test(round_)
                    self.ledger.rows.extend(uploads)
                    rows = rows + uploads
                    if self.rank == 0:
                        metrics = {**self.evaluate(client_models), **local}
                        last_eval = metrics
                except Exception as exc:  # the round is trained and aggregated: it is saved first (below)
                    eval_failure = exc
            eval_seconds = time.perf_counter() - t_eval
            answered = [rep["loss"] for rep in reports if rep["status"] == "ok"]
            row = {"round": self.rounds_done,
                   "train_loss": float(np.mean(answered)) if answered else None, "lr": self._round_lr(round_),
                   **metrics, **self._fault_counts(reports), **self.ledger.totals(round_),
                   "seconds": time.perf_counter() - t0, "eval_seconds": eval_seconds,
                   "train_seconds": sum(rep.get("seconds", 0.0) for rep in reports) / (self.world * len(self.workers)),
                   "clients": [rep["client"] for rep in reports],
                   **({"esd_steps": self.distiller.steps} if self.distiller is not None else {}),
                   **self._buffer_summary([rep for rep in reports if "buffer" in rep]),
                   **self._exchange_summary([rep for rep in reports if "label_counts" in rep], rows)}
            self.history.append(row)
            wall = self.wall_before + time.perf_counter() - start
            self._checkpoint(wall)
            self._log_round(row, rows)
            if self.rank == 0:
                write_json(self.run_dir / "results.json", self._results(wall, None))
                rounds.set_postfix(loss=f"{row['train_loss']:.3f}" if answered else "-",
                                   probe=f"{last_eval['linear_probe_acc']:.3f}" if last_eval else "-")
            if eval_failure is not None:
                rounds.close()
                raise self._evaluation_failed(eval_failure) from eval_failure
            if self.rounds_done < r.rounds and preemption.requested(self.fabric):  # SIGUSR1/SIGTERM
                raise self._preempted()  # this round's checkpoint above is where --resume starts
        rounds.close()
        final = {k: last_eval[k] for k in last_eval if k.startswith(METRICS + LOCAL_METRICS)} if last_eval else None
        results = self._results(wall, final)
        if self.rank == 0:
            write_json(self.run_dir / "results.json", results)
            self._log_final(final)
        return results
