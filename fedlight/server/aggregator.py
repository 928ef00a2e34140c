"""The narrow interface every aggregator implements (in the spirit of Flower's Strategy).

Two contracts; an aggregator picks one with ``needs_payloads``:

* sum (the default): each process folds the payloads of the clients it trained into an
  accumulator (``accumulate``), the engine sums accumulators across worker models and
  processes (one ``all_reduce``), and ``finalize`` turns the total into the new global state.
  Memory stays constant in the number of clients per round (FedAvg, FedProx, SCAFFOLD, FedOpt).
* payloads (``needs_payloads = True``): the engine keeps every answering client's payload on
  the CPU, gathers them from every worker model and process, and ``finalize`` receives them
  all as a list of :class:`ClientPayload` in client order (median, trimmed mean, Krum, Bulyan).
  Memory grows with the clients of a round: a round whose payloads would not fit
  ``run.payload_budget_mb`` is refused before any training.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

State = dict[str, torch.Tensor]
"""A model's state by name (``state_dict`` keys -> tensors): the global model, one client's payload, an
accumulator."""


class ClientPayload(NamedTuple):
    """One answering client's upload, as a payloads-contract ``finalize`` receives it.

    Attributes:
        client: the client's id (the list is sorted by it).
        weight: its aggregation weight (its local sample count under the built-in schedules).
        payload: what it sent (``module.payload()``: its shared state, name -> tensor of the
            global state's shape and dtype, e.g. ``(C_out, C_in, k, k)``), on the CPU.
    """

    client: int
    weight: float
    payload: State


class Aggregator:
    """Base class: subclasses implement ``accumulate`` and ``finalize`` (sum contract), or set
    ``needs_payloads`` and implement ``finalize`` alone (payloads contract).

    Sum contract: ``finalize(global_state, acc)`` gets the key-wise sum over every answering
    client of what ``accumulate`` folded in (None when no client answered).

    Payloads contract: ``finalize(global_state, payloads)`` gets ``list[ClientPayload]``, one
    entry per answering client, sorted by client id, each payload on the CPU with the tensors
    (names and shapes) of the global state (at least one entry: a round nobody answered keeps
    the global model without calling it, unless ``accounts_privacy``). The list and its order are
    the same for any ``fabric.devices`` and ``fabric.workers``, so the result is too, bit for bit.
    ``global_state`` maps the same names to the round's model, on the model's device;
    the returned state must have its names, shapes and dtypes.

    Attributes:
        needs_payloads: ``finalize`` receives every client's payload (the payloads contract).
        communicates: False for baselines in which nothing crosses the network.
        keeps_models_local: every client keeps its whole model (no global model to load).
        pools_clients: the clients' data is pooled into a single client (centralized).
        uses_public_set: clients send ``client_message(public embeddings)`` instead of weights.
        accounts_privacy: ``finalize`` is a privacy mechanism whose accountant models Poisson
            client sampling: below ``clients.fraction=1`` the recipe must set
            ``clients.sampling=poisson``, and a round in which nobody answered calls ``finalize``
            too (with no payloads, or None), since that round's release must be noised as well.
        option_needs: ``{option: flag}``: options that act only with a boolean option on (DP-FedAvg's
            ``target_quantile`` with ``adaptive``); a recipe that sets one with its flag off is refused.
        trains_once: with ``keeps_models_local``, a client trains only until it has a model of
            its own (its first answered round); later rounds only evaluate it.
        payload_is_state: a client's payload holds the global state's tensors and nothing else (False:
            SCAFFOLD's control deltas, FLESD's similarity matrices): what ``server.dp`` clips and noises.
    """

    trains_once = False
    option_needs: dict[str, str] = {}

    communicates = True
    uses_public_set = False
    keeps_models_local = False
    pools_clients = False
    needs_payloads = False
    accounts_privacy = False
    payload_is_state = True

    def check_clients(self, per_round: int, population: int) -> None:
        """Before any training: raise a UserError if the rule cannot work on the ``per_round``
        clients a round samples (e.g. Krum's f Byzantine clients need ``per_round >= 2f + 3``)
        out of the ``population`` it samples them from (every client that trains: all but the
        public client; DP-FedAvg's sampling rate is ``per_round / population``)."""

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        """Fold one client's ``payload`` (with its ``weight``, e.g. sample count) into ``acc``."""
        raise NotImplementedError

    def client_message(self, embeddings: torch.Tensor) -> State:
        """For ``uses_public_set`` servers: the message for a client's (N, d) public embeddings."""
        raise NotImplementedError

    def check_public_set(self, n: int, world: int = 1) -> int | None:
        """For ``uses_public_set`` servers, before the run starts: raise a UserError if a public set
        of ``n`` images (split over ``world`` ranks) cannot serve the server-side training; returns
        that training's optimizer steps an epoch (None: no server-side training)."""
        return None

    def zeros(self, payload: State) -> State:
        """An accumulator that adds nothing, shaped as if ``payload`` had been folded in."""
        return {k: torch.zeros_like(v) for k, v in self.accumulate(None, payload, 1.0).items()}

    def finalize(self, global_state: State, acc: Any) -> State:
        """The new global state: from the summed accumulator (sum contract; None when no client
        answered) or from the round's ``list[ClientPayload]`` (payloads contract)."""
        raise NotImplementedError

    def metrics(self, rounds: int) -> dict[str, float]:
        """The server's own columns of the history (and TensorBoard scalars, ``server/<name>``) after
        ``rounds`` rounds, e.g. DP-FedAvg's privacy spent (default: none)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Server-side state that must survive a checkpoint (default: none)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
