"""What a run's checkpoint holds, gathered from every part that owns some of it, and given back.

The round loop's progress (``RunState``), the server's state, what the client-state store
commits (the memory store: every client's state, gathered from all ranks; the disk store: the
manifest of the client state files written this round, which stay with the rank that owns
them) and each round part's own entries (``RoundPlugin.state_dict``) go into one file of the
run folder (``fedlight.engine.state.checkpoint`` writes it atomically, after the files it names); a
resumed run gives each of them back its share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.fabric import Fabric

from fedlight.engine.loop.client_runner import ClientRunner
from fedlight.engine.loop.interfaces import RoundPlugin
from fedlight.engine.loop.run_state import RunState
from fedlight.engine.state import resumable
from fedlight.engine.state.checkpoint import load_checkpoint, save_checkpoint
from fedlight.engine.state.run_files import CHECKPOINT
from fedlight.methods.federated_module import FederatedModule
from fedlight.server.aggregator import Aggregator


class RunCheckpoint:
    """Saves and restores a run's checkpoint file (rank 0 writes; every rank restores).

    Args:
        fabric: rank and collectives (the clients' states live on the rank that trains them).
        module: the worker model (the shapes a checkpoint must match).
        aggregator: the server, whose state is saved and restored.
        clients: this process's client runner (its client store).
        parts: the round's parts, in hook order, each keeping its own entries.
        run_dir: the run folder (the checkpoint is its ``run_folder.CHECKPOINT``).
    """

    def __init__(self, fabric: Fabric, module: FederatedModule, aggregator: Aggregator, clients: ClientRunner,
                 parts: list[RoundPlugin], run_dir: Path) -> None:
        self.fabric, self.module, self.aggregator, self.clients = fabric, module, aggregator, clients
        self.parts, self.run_dir, self.path = parts, run_dir, run_dir / CHECKPOINT
        self.rounds_saved = 0  # the rounds the newest checkpoint holds (``run.checkpoint_every`` may skip some)

    def save(self, state: RunState, wall: float, partial: dict[str, Any] | None = None) -> None:
        """Write the run as ``state`` has it after ``wall`` seconds (a collective: call on every rank);
        ``partial``: the accumulator and reports of a round a preemption stopped between clients."""
        clients, files = self.clients.store.commit(self.fabric, state.rounds_done)  # a collective
        self.rounds_saved = state.rounds_done
        if self.fabric.global_rank != 0:
            return
        parts = {k: v for part in self.parts for k, v in part.state_dict().items()} | files
        save_checkpoint(self.path, state.to_checkpoint(self.aggregator.state_dict(), clients, parts, wall, partial))

    def restore(self, rounds: int, num_clients: int, private_prefixes: tuple[str, ...]) -> RunState:
        """The saved progress, after giving the server, this rank's clients and every part their
        state back. Raises a UserError for no intact checkpoint, or ``rounds`` below the rounds it
        has completed.

        Args:
            rounds: the run's rounds now (a resumed run may be grown).
            num_clients: K, the clients a checkpoint must hold states for at most.
            private_prefixes: client-store keys that are no model tensor (a schedule's own state).
        """
        ckpt = load_checkpoint(self.path, check=lambda ckpt: resumable.problem(
            ckpt, self.module.state_dict(), num_clients, private_prefixes), needs=self.clients.store.damaged)
        state = RunState.from_checkpoint(ckpt, self.fabric.to_device, rounds, self.run_dir)
        self.rounds_saved = state.rounds_done
        self.module.load_partial(state.global_state)
        self.aggregator.load_state_dict(ckpt["server"])
        self.clients.store.restore(self.fabric, ckpt)
        for part in self.parts:
            part.load_state_dict(ckpt)
        return state
