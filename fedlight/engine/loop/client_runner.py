"""Each sampled client's local work in a round, on one process's worker models.

A client: the global shared state + its own stored private state -> its schedule's local
training -> its payload (``module.payload()``, or a plug-in's message), compressed for the upload where
``server.compress`` asks (``fedlight.compression``) and decoded for the server, folded into the
aggregator's accumulator (or kept whole, ``engine/loop/aggregation.py``), unless its fault drops it
or its result diverged; its private state (and the schedule's) saved. A client that keeps
state between rounds is always trained by rank ``c % world_size``, so its state never moves
between processes; stateless clients are dealt to ranks and worker models by sample count.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from lightning.fabric import Fabric

from fedlight.compression.update_compression import RESIDUAL
from fedlight.engine.loop import preemption
from fedlight.engine.loop.aggregation import fold
from fedlight.engine.loop.batched_clients import BatchedClients
from fedlight.engine.loop.client_faults import ClientFault
from fedlight.engine.loop.client_store import ClientStateStore, ClientStore
from fedlight.engine.loop.comm_ledger import CommLedger
from fedlight.engine.loop.interfaces import ClientSchedule, FaultModel, Report, RoundPlugin, State
from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.loop.sampling import deal_clients, owner
from fedlight.engine.loop.workers import Workers
from fedlight.engine.state.collectives import gather_dicts
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import torch_generator
from fedlight.server.aggregator import Aggregator
from fedlight.server.ops import update_norm


class ClientRunner:
    """Trains this process's share of a round's clients.

    Args:
        fabric: devices, rank and world size.
        aggregator: the server (``accumulate``; whether clients communicate or keep their models).
        schedule: how a client spends its round.
        faults: what can go wrong with a client.
        plugins: the round's other parts (one may replace a client's payload).
        sizes: every client's sample count (dealing clients to ranks).
        workers: this process's worker models.
        options: the loop's options: the run seed (each client's generator is keyed by seed, round
            and client), ``batched_clients`` (train a worker's clients that many at a time as one
            step, ``engine/loop/batched_clients.py``; None: one by one) and ``compression`` (of the uploads).
        store: where this rank's clients' private state lives (default: in memory).
    """

    def __init__(self, fabric: Fabric, aggregator: Aggregator, schedule: ClientSchedule, faults: FaultModel,
                 plugins: list[RoundPlugin], sizes: list[int], workers: Workers, options: RoundOptions,
                 store: ClientStore | None = None) -> None:
        self.fabric, self.aggregator, self.schedule, self.faults = fabric, aggregator, schedule, faults
        self.plugins, self.sizes, self.workers = plugins, sizes, workers
        self.seed, self.batched, self.compression = options.seed, options.batched_clients, options.compression
        self.rank, self.world = fabric.global_rank, fabric.world_size
        self.store = store if store is not None else ClientStateStore(owns=self.owns)
        self.keeps_payloads = faults.needs_payloads  # the fault model revises the round's payloads: keep them all
        # what ``server.compress`` compresses: the model's trainable parameters (its buffers travel as they are)
        self._parameters = frozenset(name for name, _ in workers.modules[0].named_parameters())

    def payload(self, module: FederatedModule) -> State:
        """What a client that just trained on ``module`` uploads."""
        for plugin in self.plugins:
            message = plugin.client_payload(module)
            if message is not None:
                return message
        return module.payload()

    def owns(self, client: int) -> bool:
        """Whether this rank keeps ``client``'s state."""
        return owner(client, self.world) == self.rank

    def deal_to_workers(self, sampled: list[int], module: FederatedModule) -> list[list[int]]:
        """The sampled clients this rank trains, one list per worker model (where clients keep state, on
        their own rank; else dealt to every worker of every rank by sample count, so none waits
        long for another: cross-silo, 2 processes, 13.6% -> 1.8% of a round)."""
        for plugin in self.plugins:
            sampled = plugin.participants(sampled)
        stateful = (module.private_state() or self.aggregator.keeps_models_local or self.schedule.keeps_clients
                    or (self.compression is not None and self.compression.keeps_state))
        w = len(self.workers)
        if stateful:
            mine = [c for c in sampled if self.owns(c) and self._due(c)]
            return deal_clients(mine, [self.sizes[c] for c in mine], w)
        per_worker = deal_clients(sampled, [self.sizes[c] for c in sampled], self.world * w)
        return per_worker[self.rank * w:(self.rank + 1) * w]

    def planned_steps(self, per_worker: list[list[int]]) -> int | None:
        """The optimizer steps the clients of ``per_worker`` take in all (None: their schedule cannot tell)."""
        planned = [self.schedule.planned_steps(c) for clients in per_worker for c in clients]
        return None if None in planned else sum(planned)

    def _due(self, client: int) -> bool:
        """Whether a sampled ``client`` trains: always, except under a one-off local budget
        (``trains_once``, SOLO's ``server.budget=once``) once it holds a model of its own."""
        return not (self.aggregator.trains_once and client in self.store)

    def train_on_worker(self, module: FederatedModule, clients: list[int], acc: State | None, round_: int,
                        global_state: State, progress: Callable[[], Any] | None) -> tuple[State | None, list[Report]]:
        """Train one worker model's ``clients`` in order on ``module`` (that worker model), folding their
        payloads into ``acc``; returns it and their reports. ``progress`` is called as each client
        finishes. In a one-process run a preemption stops it between two clients."""
        reports, batched = [], self._batched(module, clients, round_, global_state)
        for i, client in enumerate(clients):
            fault = self.faults.draw(round_, client)
            ledger = CommLedger()
            if self.aggregator.communicates:
                ledger.record(round_, client, "down", global_state)
            report: Report = {"client": client, "status": "ok", "work": fault.work, "ledger": ledger.rows}
            reports.append(report)
            if fault.dropped:  # fails before sending: nothing trained, nothing sent, private state kept
                report.update(status="dropped", loss=None, steps=0, samples=0, **(
                    {"detail": fault.reason} if fault.reason else {}))
            else:
                acc = self._train_one(module, client, round_, global_state, fault, acc, ledger, report, batched)
            if progress is not None:  # the client is done (progress counts finished work)
                progress()
            if self.world == 1 and i + 1 < len(clients) and preemption.received():  # stop between clients
                break
        return acc, reports

    def _batched(self, module: FederatedModule, clients: list[int], round_: int,
                 global_state: State) -> BatchedClients | None:
        """With ``batched``: the worker's answering ``clients``, trained that many at a time on ``module``."""
        if not self.batched:
            return None
        answering = [(c, fault.work) for c in clients for fault in [self.faults.draw(round_, c)] if not fault.dropped]
        return BatchedClients(self.schedule, module, self.batched, round_, answering,
                           lambda c: self._start(module, c, global_state), lambda c: self._generator(round_, c))

    def _generator(self, round_: int, client: int) -> torch.Generator:
        return torch_generator(self.seed, "local", round_, client)

    def _start(self, module: FederatedModule, client: int, global_state: State) -> State:
        """Put ``client``'s starting model into ``module`` (the global state, then its stored private
        state, or a new client's); returns what the store keeps for it."""
        module.load_partial(global_state)
        private = self.store.get(client) or {}
        module_state = self.model_tensors(private)
        if module_state:
            module.load_partial(module_state)
        if not module_state.keys() >= module.private_state().keys():
            # a new client, or one that has only the layers a changed split made private (``split_changed``):
            # the objective's own private parts (a target network, a queue) start afresh from its model
            module.reset_private_state()
        return private

    def _train_one(self, module: FederatedModule, client: int, round_: int, global_state: State, fault: ClientFault,
                   acc: State | None, ledger: CommLedger, report: Report, batched: BatchedClients | None) -> State | None:
        """Train one answering client on ``module`` (or take its result from its ``batched`` group), fill
        its ``report`` and fold its payload into ``acc`` unless its result is unusable (then its private
        state is not saved either)."""
        if batched is not None:
            work, report["seconds"] = batched.work(client)
        else:
            private = self._start(module, client, global_state)
            started = time.perf_counter()
            work = self.schedule.train(module, client, round_, self._generator(round_, client), private, fault.work)
            report["seconds"] = time.perf_counter() - started
        trained, residual = self.faults.damage(self.payload(module), fault), {}
        payload = trained
        if self.aggregator.communicates:
            payload, residual = self._upload(round_, client, trained, global_state, ledger, fault.attack is not None)
            report["update_norm"] = update_norm(payload, global_state)  # TensorBoard's histogram (RunLog)
        if work.d2d_bytes:  # images received from other clients, 8 bits per pixel
            ledger.rows.append([round_, client, "d2d", "uint8", work.d2d_bytes])
        ledger.rows.extend([round_, client, direction, dtype, n] for direction, dtype, n in work.sent)
        report.update(loss=work.result.mean_loss, steps=work.result.steps, samples=int(work.weight), **work.report)
        for plugin in self.plugins:
            report.update(plugin.client_reading(module))
        # the model it trained, and what the server decodes of it (fp16 turns an entry over 65504 into inf)
        problem = self.faults.problem(work.result.mean_loss, trained) or (
            payload is not trained and self.faults.problem(work.result.mean_loss, payload))
        if problem:  # excluded; its private state is not saved
            report.update(status="diverged", detail=problem)
            return acc
        self.store.put(client, {**self._persistent_state(module), **work.state, **residual})
        return fold(self.aggregator, acc, client, work.weight, payload, self.keeps_payloads)

    def _upload(self, round_: int, client: int, payload: State, global_state: State,
                ledger: CommLedger, attacking: bool = False) -> tuple[State, State]:
        """(what the server receives of ``payload``, the client's new residual): the payload itself, or its
        compressed update decoded, counted in the ledger as the bytes that went up.

        An ``attacking`` client's upload is compressed like any (the wire format binds it too), but its round
        neither reads nor writes error feedback's residual: that memory is the honest protocol's, and an
        attack's leftover would otherwise go up with the client's next, benign updates
        (``faults.attackers_per_round``)."""
        if self.compression is None:
            ledger.record(round_, client, "up", payload)
            return payload, {}
        stored = self.store.get(client) or {}
        upload = self.compression.compress(payload, global_state, round_, client, None if attacking else stored,
                                           self._parameters)
        ledger.record_bytes(round_, client, "up", upload.sent)
        if attacking:
            return upload.payload, {k: v for k, v in stored.items() if k.startswith(RESIDUAL)}
        return upload.payload, upload.residual

    def on_the_wire(self, round_: int, client: int, payload: State, global_state: State) -> State:
        """What the server receives of ``payload``, a model an attacker crafted from the round's decoded
        payloads (``faults.revise``): compressed like its own upload, whose bytes the ledger has counted
        (a compressed upload's bytes depend on its shapes only), without error feedback's residual."""
        if self.compression is None:
            return payload
        return self.compression.compress(payload, global_state, round_, client, None, self._parameters).payload

    def _persistent_state(self, module: FederatedModule) -> State:
        """What the store keeps for a client: its private state (and its whole model for local-only)."""
        state = module.private_state()
        return {**module.shared_state(), **state} if self.aggregator.keeps_models_local else state

    def gathered(self) -> dict[int, State]:
        """Every rank's stored client states (a collective: every rank calls it)."""
        return gather_dicts(self.fabric, self.store.state_dict())

    def model_states(self, clients: dict[int, State]) -> dict[int, State]:
        """Stored client states without the schedule's or the compression's entries (its model's tensors only)."""
        return {c: self.model_tensors(s) for c, s in clients.items()}

    def model_tensors(self, stored: State) -> State:
        """One client's ``stored`` state without the schedule's entries and error feedback's residual."""
        prefixes = self.state_prefixes()
        return {k: v for k, v in stored.items() if not k.startswith(prefixes)} if prefixes else stored

    def state_prefixes(self) -> tuple[str, ...]:
        """The client-store keys that are no model tensor: the schedule's, and error feedback's residual."""
        residual = self.compression is not None and self.compression.keeps_state
        return tuple(p for p in [self.schedule.state_prefix, RESIDUAL if residual else ""] if p)

    def split_changed(self, module: FederatedModule, clients: list[int], shared_before: set[str]) -> None:
        """The method changed what it shares: every client of this rank starts the layers it now keeps
        private from the current model, the global one (its stored state wins).

        Only the tensors in ``shared_before`` (the global state's keys before the change) are taken from
        ``module``: its other private tensors are those of the last client it trained (a BYOL target, a
        MoCo queue), which a client that has not trained yet must not start from (``_start`` resets them).
        """
        newly_private = {k: v for k, v in module.private_state().items() if k in shared_before}
        for client in clients:
            if self.owns(client):
                state = {**newly_private, **(self.store.get(client) or {})}
                if state:
                    self.store.put(client, state)
