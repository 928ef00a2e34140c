"""FLESD's server (Shi et al., 2022): ensemble the clients' public-set similarities, then distill.

No weights reach this aggregator: each client's message is decoded to its similarity matrix
S_k and folded into sum_k exp((S_k - rowmax S_k) / tau_T); the mean A is the target of
ensemble similarity distillation (ESD) of the global model on the public set, which the
engine runs through Fabric (``bind_distiller``) with the hyper-parameters held here.
"""

from __future__ import annotations

from typing import Annotated, Callable, Literal

import torch

from fedlight.config.checks import at_least, non_negative, percent, positive, probability
from fedlight.errors import UserError
from fedlight.server.aggregator import Aggregator, State
from fedlight.server.similarity import decode, encode, ensemble_term, payload_kind

COUNT_KEY = "__count__"
ENSEMBLE_KEY = "ensemble"


def usable_batch(rows: int, world: int = 1) -> bool:
    """Whether an ESD batch of ``rows`` public images is stepped on: every one of ``world`` ranks
    gets at least two of its rows, as BatchNorm needs in training mode (one rank: a trailing
    batch of one image is skipped, as local training skips it, ``engine/loop/local_loop.py``)."""
    return rows >= 2 * world


def esd_steps_per_epoch(n: int, batch_size: int, queue_size: int, world: int = 1) -> int:
    """Optimizer steps one ESD epoch over ``n`` public images takes (FLESD sec. 4.3, Algorithm 1).

    An epoch walks ``ceil(n / batch_size)`` batches; a batch that fails ``usable_batch`` is
    skipped, and the first ``queue_size // batch_size`` batches only fill the key queue (the
    queue restarts every epoch), so they take no step either.

    Args:
        n: public images N.
        batch_size: ESD batch B.
        queue_size: anchor queue length Q.
        world: processes the batch's rows are split over.
    """
    full = n // batch_size if usable_batch(batch_size, world) else 0
    tail = 1 if usable_batch(n % batch_size, world) else 0
    return max(0, full + tail - queue_size // batch_size)


class FLESD(Aggregator):
    """Similarity-matrix aggregation with ensemble similarity distillation.

    Args:
        payload: ``similarity`` (N x N) or ``embeddings`` (N x d) per client.
        dtype: ``float32``, ``float16`` or ``int8`` on the wire.
        topk_percent: keep only the top p% of each similarity row (100: all).
        tau_t: target temperature (0.1).
        tau_s: student temperature (0.1).
        momentum: momentum-encoder factor zeta (0.999).
        queue_size: anchor queue length (2048).
        epochs: ESD epochs over the public set (200).
        batch_size: ESD batch (128).
        lr: ESD Adam learning rate (1e-3).
        weight_decay: ESD Adam weight decay (1e-6).
    """

    uses_public_set = True
    payload_is_state = False  # similarity matrices (or embeddings) of the public set

    def __init__(self, payload: Literal["similarity", "embeddings"] = "similarity",
                 dtype: Literal["float32", "float16", "int8"] = "float32",
                 topk_percent: Annotated[float, percent] = 100.0, tau_t: Annotated[float, positive] = 0.1,
                 tau_s: Annotated[float, positive] = 0.1, momentum: Annotated[float, probability] = 0.999,
                 queue_size: Annotated[int, positive] = 2048, epochs: Annotated[int, positive] = 200,
                 batch_size: Annotated[int, at_least(2)] = 128, lr: Annotated[float, positive] = 1e-3,
                 weight_decay: Annotated[float, non_negative] = 1e-6) -> None:
        if payload == "embeddings" and topk_percent < 100:
            raise UserError("server.topk_percent applies to server.payload=similarity only; drop it or switch payload")
        self.payload, self.dtype, self.topk_percent = payload, dtype, topk_percent
        self.tau_t, self.tau_s, self.momentum = tau_t, tau_s, momentum
        self.queue_size, self.epochs, self.batch_size = queue_size, epochs, batch_size
        self.lr, self.weight_decay = lr, weight_decay
        self.distiller: Callable[..., State] | None = None

    def check_public_set(self, n: int, world: int = 1) -> int:
        """ESD steps an epoch over ``n`` public images split over ``world`` ranks (``esd_steps_per_epoch``).

        Raises:
            UserError: the queue and batch leave no step: the first ``queue_size // batch_size``
                batches of an epoch only fill the queue (FLESD Algorithm 1), so the queue must
                be shorter than the public set's usable batches.
        """
        steps = esd_steps_per_epoch(n, self.batch_size, self.queue_size, world)
        if steps >= 1:
            return steps
        batches = esd_steps_per_epoch(n, self.batch_size, 0, world)
        ranks = f" over {world} ranks" if world > 1 else ""
        fix = (f"set server.queue_size below {batches * self.batch_size}" if batches
               else f"set server.batch_size to at least {2 * world}")
        raise UserError(f"server.queue_size={self.queue_size} with server.batch_size={self.batch_size} leaves "
                        f"{steps} ESD steps an epoch on the public set of {n} images{ranks}: the first "
                        f"queue_size // batch_size = {self.queue_size // self.batch_size} of its {batches} "
                        f"batches only fill the queue; {fix}, or make the public set larger")

    def bind_distiller(self, distiller: Callable[..., State]) -> None:
        """The engine's ESD trainer: ``distiller(ensemble, **esd_hyperparameters) -> new global state``."""
        self.distiller = distiller

    def client_message(self, embeddings: torch.Tensor) -> State:
        """What a client sends for its (N, d) unit-length public embeddings."""
        return encode(embeddings, self.payload, self.dtype, self.topk_percent)

    def accumulate(self, acc: State | None, payload: State, weight: float) -> State:
        n = len(payload[payload_kind(payload)])  # one row per public image, whatever the kind
        term = ensemble_term(decode(payload, n), self.tau_t)
        if acc is None:
            acc = {ENSEMBLE_KEY: torch.zeros_like(term), COUNT_KEY: torch.zeros((), device=term.device)}
        acc[ENSEMBLE_KEY] += term
        acc[COUNT_KEY] += 1
        return acc

    def finalize(self, global_state: State, acc: State | None) -> State:
        if acc is None or float(acc[COUNT_KEY]) == 0:
            return global_state
        if self.distiller is None:
            raise RuntimeError("FLESD needs the engine's distiller (bind_distiller) before finalize")
        ensemble = acc[ENSEMBLE_KEY] / acc[COUNT_KEY]  # A = mean_k A_k (FLESD eq. 6)
        return self.distiller(ensemble, tau_s=self.tau_s, momentum=self.momentum, queue_size=self.queue_size,
                              epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                              weight_decay=self.weight_decay)
