"""The round loop's plug-in interfaces: what a paper adds to a round without editing the loop.

The loop (``fedlight.engine.loop.federation``) knows the order of a round and nothing of any
paper. A paper's behaviour is a part behind one of these narrow interfaces:

* :class:`ClientSchedule`: how a client spends its round (epochs over its data, a stream
  through a replay buffer, device-to-device iteration periods, ...);
* :class:`RoundPlugin`: anything else a round calls: a different client message (FLESD's
  public-set similarities and its server-side distillation), an extra evaluation (LG-FedAvg's
  local and new tests), faults. Each part owns its history columns, its TensorBoard scalars
  and pictures, and the state it needs in a checkpoint. Another package adds one through the
  entry point ``fedlight.plugins``, built from a :class:`PluginContext` and its recipe options.

Every hook has a default that does nothing, so a part implements only what it changes; the
loop calls each hook on every part in turn, as Lightning's ``fabric.call`` calls callbacks.
What the loop asks of a method beyond ``FederatedModule`` is :class:`ChangingSplit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from fedlight.engine.loop.client_faults import ClientFault
from fedlight.engine.loop.local_loop import LocalResult
from fedlight.engine.output.progress import EvalPhases
from fedlight.methods.federated_module import FederatedModule
from fedlight.server.aggregator import ClientPayload

State = dict[str, torch.Tensor]
ACCURACY = "accuracy"  # the TensorBoard tag group of every accuracy curve (listed first: alphabetical)
Report = dict[str, Any]
"""One client's round, as the engine records it (kept in checkpoints): ``client``, ``status`` (``'ok'`` when it
answered), ``loss``, ``steps``, ``samples``, ..."""


@runtime_checkable
class ChangingSplit(Protocol):
    """A method whose shared / private split changes between rounds (LG-FedAvg, Liang et al. 2020:
    FedAvg first, then its local layers stay on the clients). Before every round the loop asks each
    worker model; where the split changed, the round's global state becomes what the method now
    shares and the clients' stored states are split again."""

    def update_split(self, round_: int, history: list[dict[str, Any]]) -> bool:
        """Before (0-based) ``round_``, given the history rows so far: True if the split just changed."""
        ...


class RoundPlugin:
    """A part of a round: every hook is optional."""

    def on_round_start(self, round_: int, global_state: State) -> None:
        """Before any client of (0-based) ``round_`` trains; ``global_state`` is the round's model."""

    def participants(self, sampled: list[int]) -> list[int]:
        """The clients that train in the round ``on_round_start`` last announced, given the loop's
        ``sampled`` clients (e.g. a device that arrives online, with a share of the others)."""
        return sampled

    def client_payload(self, module: FederatedModule) -> State | None:
        """What a client that just trained on ``module`` sends, if not ``module.payload()`` (None)."""
        return None

    def client_reading(self, module: FederatedModule) -> dict[str, float]:
        """Numbers this part reads off the model a client just trained on ``module``, for the client's report
        (its ``columns`` summarise them over the round's clients; e.g. the clients' drift from the global model)."""
        return {}

    def evaluate(self, round_: int, clients: dict[int, State], global_state: State,
                 ledger: list[list]) -> tuple[dict[str, float | None], list[list]]:
        """Extra metrics of an evaluation round (on every rank; metrics matter on rank 0 only).

        Args:
            round_: the (0-based) round just trained.
            clients: every client's stored state, gathered from all ranks (only when ``needs_clients``).
            global_state: the aggregated model.
            ledger: the run's ledger rows so far (what earlier rounds charged).

        Returns:
            metrics for the history row, and ledger rows ``[round, client, direction, dtype, n]``.
        """
        return {}, []

    def random_init_metrics(self, global_state: State) -> dict[str, float | None]:
        """This part's metrics of the random-init model, before round 1 (rank 0): the floor its
        ``evaluate`` columns are judged against, in ``results.json``'s ``baseline``. Every client
        then holds ``global_state``; no upload is charged and no state of the part changes."""
        return {}

    needs_clients = False  # ``evaluate`` needs every client's stored state (a collective)
    metric_prefixes: tuple[str, ...] = ()  # history columns of ``evaluate`` that are final metrics

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        """This part's columns of the round's history row (all ranks see every report)."""
        return {}

    def log_open(self, logger: Any, run_dir: Path, fresh: bool) -> None:
        """When the run (``fresh``) or its resumption opens its logs: files, step-0 pictures (rank 0;
        ``logger`` a Lightning ``TensorBoardLogger``)."""

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        """This part's scalars of the round's ``row`` (pictures go straight to ``logger``; rank 0)."""
        return {}

    def log_clients(self, logger: Any, round_: int, reports: list[Report]) -> None:
        """This part's pictures of the (1-based) ``round_``'s client ``reports``, every rank's, in
        TensorBoard (e.g. a histogram of a per-client value: it stays out of the history; rank 0)."""

    def option_keys(self) -> tuple[str, ...]:
        """The recipe sections (``stream``) or dotted keys (``local.epochs``) this part reads: the
        run's TensorBoard hparams list them (``fedlight.engine.output.tensorboard.used_hparams``)."""
        return ()

    def state_dict(self) -> dict[str, Any]:
        """Checkpoint entries this part keeps (top-level keys of the checkpoint)."""
        return {}

    def load_state_dict(self, checkpoint: dict[str, Any]) -> None:
        """Restore from the whole checkpoint mapping what ``state_dict`` saved."""


@dataclass
class ClientWork:
    """One client's round as a :class:`ClientSchedule` trained it.

    Attributes:
        result: loss and optimizer steps.
        weight: the client's aggregation weight (e.g. its sample count).
        report: the schedule's entries of the client's report (lists and numbers only).
        state: store entries the schedule keeps for the client, under its ``state_prefix``.
        d2d_bytes: bytes the client received from other clients this round.
        sent: other transmissions of the client this round, as (direction, dtype, bytes) ledger
            entries (e.g. CF-CL's local models sent to its neighbours, Fig. 3(e)).
    """

    result: LocalResult
    weight: float
    report: Report = field(default_factory=dict)
    state: State = field(default_factory=dict)
    d2d_bytes: int = 0
    sent: list[tuple[str, str, int]] = field(default_factory=list)


def floors(evaluator: Any, parts: list[RoundPlugin],
           global_state: State) -> Callable[[EvalPhases], dict[str, float | None]]:
    """The evaluation of the run's floors, for ``RoundBars.evaluate``: the random-init model's probe,
    kNN and classifier (``evaluator.model_metrics``, which tells the progress bars each phase), then
    every part's ``random_init_metrics``."""
    def evaluate(phases: EvalPhases) -> dict[str, float | None]:
        metrics = evaluator.model_metrics(phases)
        for part in parts:
            metrics.update(part.random_init_metrics(global_state))
        return metrics
    return evaluate

class ClientSchedule(RoundPlugin):
    """How a client spends its round.

    Attributes:
        keeps_clients: a client's schedule state persists, so the client always trains on the
            same rank (``client % world_size``).
        state_prefix: the client-store keys this schedule owns ("" if none).
        side_by_side: several worker models may train clients of one process at once.
        batch_refusal: why it cannot train several clients as one step (``local.batched_clients``,
            ``train_together``), or None where it can.
    """

    keeps_clients = False
    state_prefix = ""
    side_by_side = True
    batch_refusal: str | None = "it trains one client at a time (it has no train_together)"

    def begin_round(self, round_: int, global_state: State, receivers: list[int]) -> None:
        """Before ``round_``'s clients train; ``receivers``: this process's first worker's clients."""

    def planned_steps(self, client: int) -> int | None:
        """The optimizer steps ``client`` takes in a round when it does all its work (the progress
        bars and the run's ETA), or None when the schedule cannot tell beforehand."""
        return None

    def option_keys(self) -> tuple[str, ...]:
        """What ``ScheduleContext`` hands a schedule of its ``local.*`` keys (built-ins narrow it)."""
        return ("local.epochs", "local.iterations")

    def train(self, module: FederatedModule, client: int, round_: int, generator: torch.Generator,
              private: State, work: float) -> ClientWork:
        """Train ``client`` on ``module`` for ``round_``; a straggler does only ``work`` (< 1) of it.

        ``private`` is the client's stored state (the schedule's entries under ``state_prefix``).
        """
        raise NotImplementedError

    def train_together(self, module: FederatedModule, clients: list[int], round_: int,
                       generators: list[torch.Generator], works: list[float],
                       start: Callable[[int], None]) -> list[tuple[ClientWork, State]]:
        """Train ``clients`` for ``round_`` as one step each (``batch_refusal`` None), each exactly as
        ``train`` would from its own generator; a straggler does only its ``works`` share.

        ``start(client)`` puts a client's starting state into ``module`` (the global model and its
        stored private state). Returns each client's work and its final tensors, for
        ``batched_loop.finish_client`` to put back into ``module`` when its payload is taken.
        """
        raise NotImplementedError


class FaultModel(RoundPlugin):
    """What can go wrong with a sampled client, and what the run does about it. The default: nothing.

    Attributes:
        needs_payloads: ``revise`` sees every answering client's payload of the round, so the round
            keeps them all on the CPU, as the payloads contract does (``engine/loop/aggregation.py``).
    """

    needs_payloads = False

    def draw(self, round_: int, client: int) -> ClientFault:
        """``client``'s fault in ``round_`` (keyed by seed, round and client)."""
        return ClientFault()

    def damage(self, payload: State, fault: ClientFault) -> State:
        """The payload as the fault leaves it (e.g. NaN for an injected divergence)."""
        return payload

    def problem(self, loss: float, payload: State) -> str | None:
        """Why a trained client's result is unusable (then excluded, its state not saved), or None."""
        return None

    def revise(self, round_: int, payloads: list[ClientPayload]) -> list[ClientPayload]:
        """With ``needs_payloads``, once every client of every rank has trained: the round's
        ``payloads`` (every rank's, sorted by client, on the CPU) as the faults leave them (e.g.
        attackers that craft theirs from the others'). A payload it replaces is checked by
        ``problem`` again; a client excluded then keeps the private state it trained."""
        return payloads

    def check(self, round_: int, reports: list[Report], rounds_done: int) -> None:
        """After a round's clients: record its faults; raise ``RunStopped`` if the run cannot go on."""


@dataclass(frozen=True)
class ScheduleContext:
    """What a client schedule is built from: ``factory(context)`` for a package's (entry point
    ``fedlight.schedules``), ``cls.from_context(context)`` for a class that has one (fedlight's own).

    Attributes:
        fabric: devices, precision and this process's rank.
        module: the worker model.
        images: (N, C, H, W) uint8 images on the device; labels: (N,) labels on the device.
        train_labels: (N,) labels on the CPU (for measurement).
        parts: every client's sample indices into ``images``.
        views: batched augmentation (``views.views(x, n, generator)``).
        clients: the trainable clients this process keeps (``c % world_size == rank``).
        rounds: R; epochs, iterations, batch_size: ``local.*``; num_classes: C; seed: run seed.
        options: every part's typed options (``engine.run.part_options.PartOptions``): fedlight's own
            schedules read theirs there (SOFed's ``stream``, CF-CL's ``exchange``).
    """

    fabric: Any
    module: FederatedModule
    images: torch.Tensor
    labels: torch.Tensor
    train_labels: Any
    parts: list[torch.Tensor]
    views: Any
    clients: list[int]
    rounds: int
    epochs: int
    iterations: int | None
    batch_size: int
    num_classes: int
    seed: int
    options: Any = None


@dataclass(frozen=True)
class PluginContext:
    """What a round plug-in is built from: ``cls(context, **options)`` for a package's (entry point
    ``fedlight.plugins``), the options being its recipe section ``plugins.<name>``; ``cls.from_context(context)``
    for fedlight's own (``catalog.ROUND_PARTS``), each switched on by its own recipe keys.

    Attributes:
        fabric: devices, precision and this process's rank.
        module: the worker model (worker 0's: the one evaluation and checkpoints use).
        evaluator: the run's ``engine.evaluator.Evaluator`` (probe and kNN of a model state).
        images: (N, C, H, W) uint8 training images on the device; labels: (N,) their labels on the CPU.
        parts: every client's sample indices into ``images``.
        trainable: the clients that train (a public client excepted).
        rounds: R; num_classes: C; seed: the run seed; run_dir: the run folder.
        views: the run's batched augmentation (``data.views.ViewMaker``).
        aggregator: the run's server.
        options: every part's typed options (``engine.run.part_options.PartOptions``).
        data: the data as loaded (``data.image_data.ImageData``: test split, public images, domains);
            ``images`` adds LG-FedAvg's new device's training images to its.
        new_device: LG-FedAvg's new device (``data.rotated.RotatedDevice``: its rotated test images), or None.
        public_client: the client whose share is FLESD's public set, or None.
    """

    fabric: Any
    module: FederatedModule
    evaluator: Any
    images: torch.Tensor
    labels: torch.Tensor
    parts: list[torch.Tensor]
    trainable: list[int]
    rounds: int
    num_classes: int
    seed: int
    run_dir: Path
    views: Any = None
    aggregator: Any = None
    options: Any = None
    data: Any = None
    new_device: Any = None
    public_client: int | None = None
