"""What a checkpoint must hold for a run to resume from it.

A file that loads (and matches its sha256) may still be the wrong one: a torch file of
something else, a checkpoint missing a field, or the checkpoint of a run of another method
or backbone copied into the run folder. ``problem`` says so before anything is restored, so
``load_checkpoint`` names the file in one line (after trying ``last.pt.prev``) instead of a
``KeyError`` or a ``load_state_dict`` size mismatch surfacing mid-restore.
"""

from __future__ import annotations

from typing import Any

import torch

State = dict[str, torch.Tensor]

# every field the orchestrator writes and reads back; "faults", "partial" and "provenance" came later
FIELDS: dict[str, tuple[type, ...]] = {
    "rounds_completed": (int,), "global": (dict,), "server": (dict,), "clients": (dict,), "history": (list,),
    "ledger": (list,), "baseline": (dict, type(None)), "wall_seconds": (int, float),
}
# the disk store's record of every client's state file (client_state_files.py); an earlier fedlight's
# of the round's changed ones
OPTIONAL: dict[str, tuple[type, ...]] = {"faults": (list,), "partial": (dict, type(None)),
                                         "client_state_files": (dict,), "client_files": (dict,),
                                         "provenance": (list,)}


def problem(ckpt: dict[str, Any], model: State, num_clients: int, private_prefixes: tuple[str, ...]) -> str | None:
    """What makes ``ckpt`` unfit to resume this run, as words that follow "holds"; None if it fits.

    Args:
        ckpt: a loaded checkpoint (a mapping with an int ``rounds_completed``).
        model: this run's worker model's ``state_dict()``: the names and shapes a global model
            or a client's private state may hold.
        num_clients: the run's client count (client ids are below it).
        private_prefixes: keys of client state that are not model tensors (replay buffers,
            exchange state).
    """
    return (_fields_problem(ckpt) or _history_problem(ckpt)
            or _state_problem(ckpt["global"], model, "its global model", ())
            or _clients_problem(ckpt["clients"], model, num_clients, private_prefixes)
            or _manifest_problem(ckpt.get("client_state_files") or ckpt.get("client_files") or {}, num_clients))


def _fields_problem(ckpt: dict[str, Any]) -> str | None:
    for key, kinds in {**FIELDS, **OPTIONAL}.items():
        if key not in ckpt:
            if key in FIELDS:
                return f"no '{key}' (not a fedlight checkpoint)"
        elif not isinstance(ckpt[key], kinds) or isinstance(ckpt[key], bool):
            return f"'{key}' as a {type(ckpt[key]).__name__} (not a fedlight checkpoint)"
    partial = ckpt.get("partial")
    if partial is not None and not (isinstance(partial.get("reports"), list)
                                    and isinstance(partial.get("acc"), (dict, type(None)))):
        return "an unfinished round without its client reports (not a fedlight checkpoint)"
    return None


def _history_problem(ckpt: dict[str, Any]) -> str | None:
    history, done = ckpt["history"], ckpt["rounds_completed"]
    if done != len(history):
        return f"'rounds_completed' {done} but {len(history)} rounds of history (edited, or not a fedlight checkpoint)"
    bad = next((i for i, row in enumerate(history) if not isinstance(row, dict) or "knn_acc" not in row), None)
    return None if bad is None else f"history row {bad} without the metrics a run writes (not a fedlight checkpoint)"


def _state_problem(state: dict[Any, Any], model: State, what: str, skip: tuple[str, ...]) -> str | None:
    for key, value in state.items():
        if isinstance(key, str) and key.startswith(skip):
            continue
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            return f"{what} with an entry {key!r} that is not a named tensor (not a fedlight checkpoint)"
        if key not in model:
            return f"a model of another method or backbone ({what} has '{key}', which this run's model has not)"
        if value.shape != model[key].shape:
            return (f"a model of another method or backbone ({what} has '{key}' of shape {tuple(value.shape)}, "
                    f"this run's {tuple(model[key].shape)})")
    return None


def _clients_problem(clients: dict[Any, Any], model: State, num_clients: int, skip: tuple[str, ...]) -> str | None:
    for client, state in clients.items():
        if not isinstance(client, int) or not 0 <= client < num_clients:
            return f"state of client {client!r}, not a client of this run (0..{num_clients - 1})"
        if not isinstance(state, dict):
            return f"client {client}'s state as a {type(state).__name__} (not a fedlight checkpoint)"
        found = _state_problem(state, model, f"client {client}'s state", skip)
        if found:
            return found
    return None


def _manifest_problem(manifest: dict[Any, Any], num_clients: int) -> str | None:
    """The disk store's record: client -> [round, sha256] of the files the checkpoint commits."""
    for client, entry in manifest.items():
        if not isinstance(client, int) or not 0 <= client < num_clients:
            return f"a state file of client {client!r}, not a client of this run (0..{num_clients - 1})"
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], int)
                and isinstance(entry[1], str)):
            return f"client {client}'s state file entry {entry!r}, not [round, sha256] (not a fedlight checkpoint)"
    return None
