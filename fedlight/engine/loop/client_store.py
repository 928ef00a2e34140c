"""Per-client persistent private state, kept off the training device: the in-memory store, and which store a run uses.

The engine trains every client on one worker model per process; whatever a method must
remember about a client between its rounds (BYOL's target network, MOON's previous model,
SCAFFOLD's control variate) lives in a store, so memory grows with that state, not with K
models. Two stores keep it (``run.client_state``):

* ``memory`` (this module): a dict; each checkpoint holds every client's state (``clients``).
* ``disk`` (``fedlight.engine.state.disk_store``): a file per client and round under
  ``checkpoints/clients/`` with a bounded cache; a checkpoint writes only the round's changes.

``auto`` (the default) keeps the states in memory while all of them fit in ``run.state_cache_mb``.
Both read a checkpoint of either kind, so a run resumes whichever store wrote it. A client's
state lives on the rank that owns it (``sampling.owner``) in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from lightning.fabric import Fabric

from fedlight.engine.loop.round_options import RoundOptions
from fedlight.engine.loop.sampling import owner
from fedlight.engine.state import client_state_files as files
from fedlight.engine.state.collectives import gather_dicts
from fedlight.engine.state.disk_store import DiskClientStateStore

State = dict[str, torch.Tensor]
MIB = 2**20


class ClientStore(Protocol):
    """What the round loop and ``ClientRunner`` ask of a client-state store."""

    def get(self, client: int) -> State | None: ...
    def put(self, client: int, state: State) -> None: ...
    def __contains__(self, client: int) -> bool: ...
    def state_dict(self) -> dict[int, State]: ...
    def damaged(self, ckpt: dict[str, Any]) -> str | None: ...
    def commit(self, fabric: Fabric, rounds_done: int) -> tuple[dict[int, State], dict[str, Any]]: ...
    def restore(self, fabric: Fabric, ckpt: dict[str, Any]) -> None: ...


class ClientStateStore:
    """A mapping client id -> private state dict, stored on CPU (``run.client_state=memory``).

    Args:
        folder: ``checkpoints/clients`` (read when resuming from a checkpoint the disk store wrote).
        owns: whether this rank keeps a client.
    """

    def __init__(self, folder: Path | None = None, owns: Callable[[int], bool] = lambda c: True) -> None:
        self.folder, self.owns = folder, owns
        self._states: dict[int, State] = {}

    def get(self, client: int) -> State | None:
        """The client's saved state, or None if it has none yet."""
        return self._states.get(client)

    def put(self, client: int, state: State) -> None:
        """Save a detached CPU copy of ``state`` for ``client`` (nothing is kept for empty state)."""
        if state:
            self._states[client] = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}

    def __contains__(self, client: int) -> bool:
        return client in self._states

    def state_dict(self) -> dict[int, State]:
        return dict(self._states)

    def load_state_dict(self, states: dict[int, State], keep: Callable[[int], bool] = lambda c: True) -> None:
        """Restore states; ``keep`` selects the clients this process owns."""
        self._states = {int(c): s for c, s in states.items() if keep(int(c))}

    def damaged(self, ckpt: dict[str, Any]) -> str | None:
        """What makes a checkpoint's client state files unusable (``load_checkpoint``'s ``needs``)."""
        return files.manifest_damage(ckpt, self.folder) if self.folder is not None else None

    def commit(self, fabric: Fabric, rounds_done: int) -> tuple[dict[int, State], dict[str, Any]]:
        """(every client's state, gathered to every rank; no other checkpoint entry): a collective."""
        return gather_dicts(fabric, self.state_dict()), {}

    def restore(self, fabric: Fabric, ckpt: dict[str, Any]) -> None:
        """This rank's clients' states from a checkpoint of either store (every rank; a collective
        when it reads files)."""
        self.load_state_dict(ckpt["clients"], keep=self.owns)
        in_files = files.MANIFEST in ckpt or files.LEGACY_MANIFEST in ckpt
        if in_files and self.folder is None:  # a library caller's store: never drop them silently
            raise ValueError("this checkpoint keeps its client states in files; give the store their folder")
        if in_files:
            index = files.restore(fabric, ckpt, self.folder, self.owns)
            for client, (version, digest) in index.newest().items():
                self._states[client] = files.read_state(index.path(client, version), digest)


def choose_store(requested: str, per_client_bytes: int, clients: int, cache_mb: int) -> str:
    """``memory`` or ``disk`` for ``run.client_state``: ``auto`` keeps the states in memory while all
    ``clients`` of ``per_client_bytes`` fit in ``cache_mb`` MiB (every stateless run, and small K)."""
    if requested != "auto":
        return requested
    return "memory" if per_client_bytes * clients <= cache_mb * MIB else "disk"


def open_store(options: RoundOptions, checkpoint: Path, fabric: Fabric) -> ClientStore:
    """The store ``options.client_state`` (``memory`` or ``disk``) for this rank's clients, its files
    beside the run's ``checkpoint`` (``checkpoints/clients``)."""
    rank, world, folder = fabric.global_rank, fabric.world_size, checkpoint.parent / files.FOLDER
    owns = lambda client: owner(client, world) == rank  # noqa: E731
    if options.client_state == "disk":
        return DiskClientStateStore(folder, options.state_cache_mb, owns, options.checkpoint_every)
    return ClientStateStore(folder, owns)
