"""The disk-backed client-state store: a file per client and round, a bounded cache, incremental checkpoints.

For stateful methods at cross-device scale (SCAFFOLD's control variates, MOON's previous
models at 10,000 clients), where the in-memory store and a checkpoint that rewrites every
client's state grow with K. Here a client's state is written once, when it changes, as
``checkpoints/clients/c<client>-r<round>-<sha256>.pt`` (``fedlight.engine.state.client_state_files``)
by the rank that owns the client; the most recently used states stay in an LRU cache of at
most ``run.state_cache_mb`` MiB. A round's checkpoint gathers only the files that changed
(client -> [round, sha256], a few dozen entries) and ``last.pt`` records, for every client holding
a state, its file (87 bytes a client in `last.pt`, 245 in memory: 0.55 MB at 6,326 such clients), so the states
themselves, in memory and in checkpoint bytes, grow with the clients sampled per round, not with K.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import torch
from lightning.fabric import Fabric

from fedlight.engine.state import client_state_files as files
from fedlight.engine.state.collectives import gather_dicts

State = dict[str, torch.Tensor]
MIB = 2**20


class DiskClientStateStore:
    """Client id -> private state, in files under ``folder`` with an LRU cache in memory.

    Args:
        folder: ``checkpoints/clients`` of the run folder.
        cache_mb: the cache's bound in MiB (``run.state_cache_mb``).
        owns: whether this rank keeps a client (it only ever reads and writes those).
        checkpoint_every: ``run.checkpoint_every``, the most rounds between two checkpoints. Between them a
            client's file is rewritten under one version (the round after the last checkpoint), so only the
            newest state of each client is on disk when the next checkpoint records it.

    Attributes:
        written_bytes, written_seconds: bytes of client state files written so far, and the
            seconds spent writing them (benchmarks/state_scale.py reads both).
    """

    def __init__(self, folder: Path, cache_mb: int, owns: Callable[[int], bool], checkpoint_every: int = 1) -> None:
        self.folder, self.owns, self.capacity, self.every = folder, owns, cache_mb * MIB, checkpoint_every
        self.files = files.StateFiles(folder, owns)
        self._cache: OrderedDict[int, State] = OrderedDict()
        self._cached_bytes = 0
        self._changed: dict[int, list] = {}  # client -> [version, sha256] written since the last checkpoint
        self._record: dict[int, list] = {}  # every rank's clients: client -> [version, sha256] of its state
        self._version = 1  # the round being trained, 1-based: the version of the files it writes
        self._committed: int | None = None  # rounds completed at the last checkpoint this store took part in
        self.written_bytes, self.written_seconds = 0, 0.0
        self._lock = threading.Lock()

    def get(self, client: int) -> State | None:
        """The client's saved state (from the cache, else its newest file), or None if it has none yet."""
        with self._lock:  # worker threads (fabric.workers > 1) share the cache and the index
            state = self._cache.get(client)
            if state is not None:
                self._cache.move_to_end(client)
                return state
            versions = self.files.versions.get(client)
            if not versions:
                return None
            newest = max(versions)
            state = files.read_state(self.files.path(client, newest), versions[newest])
            self._remember(client, state)
            return state

    def put(self, client: int, state: State) -> None:
        """Write a detached CPU copy of ``state`` as ``client``'s file of this round (nothing for empty state)."""
        if not state:
            return
        state = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
        with self._lock:
            started = time.perf_counter()
            digest, size = files.write_state(self.folder, client, self._version, state)
            self.written_seconds += time.perf_counter() - started
            self.files.add(client, self._version, digest)
            self._changed[client] = [self._version, digest]
            self.written_bytes += size
            self._remember(client, state)

    def __contains__(self, client: int) -> bool:
        return bool(self.files.versions.get(client))

    def state_dict(self) -> dict[int, State]:
        """Every state this rank keeps, read from disk where not cached (the evaluations that need
        every client's model: local-only, LG's local tests), leaving the cache as it was."""
        out = {}
        for client, versions in sorted(self.files.versions.items()):
            if versions:
                newest = max(versions)
                out[client] = self._cache.get(client) or files.read_state(self.files.path(client, newest),
                                                                          versions[newest])
        return out

    def damaged(self, ckpt: dict[str, Any]) -> str | None:
        """What makes a checkpoint's client state files unusable (``load_checkpoint``'s ``needs``)."""
        return files.manifest_damage(ckpt, self.folder)

    def commit(self, fabric: Fabric, rounds_done: int) -> tuple[dict[int, State], dict[str, Any]]:
        """Every rank's files of this round synced and their records gathered (a collective, which
        also tells this rank that the previous checkpoint was committed, so files only older
        checkpoints need can go); returns (no client states, the record of every client's file)
        for ``last.pt``."""
        files.sync_folder(self.folder)
        self._record.update(gather_dicts(fabric, self._changed))
        if self._committed is not None:  # last.pt holds that round; last.pt.prev at most ``every`` rounds earlier
            self.files.prune(self._committed - self.every)
        self._committed, self._version, self._changed = rounds_done, rounds_done + 1, {}
        return {}, {files.MANIFEST: dict(self._record)}

    def restore(self, fabric: Fabric, ckpt: dict[str, Any]) -> None:
        """This rank's clients from a checkpoint of either store (every rank; a collective): the files
        a disk checkpoint records, or the states a memory checkpoint holds, written as files of its round."""
        done = int(ckpt["rounds_completed"])
        self.files = files.restore(fabric, ckpt, self.folder, self.owns)
        self._record = {c: list(entry) for c, entry in files.recorded(ckpt, self.folder).items()}
        self._changed = {}
        for client, state in ckpt["clients"].items():  # a memory store's checkpoint: its states become files
            if self.owns(int(client)) and state:
                digest, _ = files.write_state(self.folder, int(client), done, state)
                self.files.add(int(client), done, digest)
                self._changed[int(client)] = [done, digest]  # recorded by the next checkpoint
        files.sync_folder(self.folder)
        self._cache.clear()
        self._cached_bytes = 0
        self._committed, self._version = done, done + 1

    def _remember(self, client: int, state: State) -> None:
        """Cache ``state`` as the most recently used, evicting the least recently used beyond the bound."""
        old = self._cache.pop(client, None)
        if old is not None:
            self._cached_bytes -= files.state_bytes(old)
        size = files.state_bytes(state)
        if size > self.capacity:
            return
        self._cache[client] = state
        self._cached_bytes += size
        while self._cached_bytes > self.capacity:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= files.state_bytes(evicted)
