"""Compression of a client's upload (``server.compress``): the update, the client's model minus the global
model it was sent, encoded before it leaves the client and decoded by the server before its rule sees it.

A client's trainable parameters are compressed one by one (``fedlight.compression.codecs``: the encodings,
their math and their bytes); buffers travel as they are, since they are statistics, not steps of a descent:
BatchNorm's running variance rebuilt from a sparse or quantized update, let alone one carrying a residual,
can fall below 0 and make every feature NaN (a pilot run's top-1% with error feedback did, at round 4). The server rebuilds the client's model as x_t + decoded update, so
every aggregator, robust rules and ``server.dp`` included, sees a model of the global state's shape.

With ``error_feedback`` (Stich, Cordonnier, Jaggi, "Sparsified SGD with Memory", NeurIPS 2018;
Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other Gradient Compression
Schemes", ICML 2019, Algorithm 2) a client keeps e, what it did not send: it sends C(Delta + e) and keeps
e' = Delta + e - C(Delta + e) for its next round. e is client state: it lives in the client-state store
under ``RESIDUAL`` (memory or disk, checkpointed with the rest, so a resumed run goes on bit for bit).
Random-k is sent unscaled under error feedback (the k-contraction of Stich et al.'s Definition 2.1), scaled
by n / k (unbiased) without it; QSGD likewise is divided by 1 + w under error feedback (``codecs``), which
makes the unbiased quantizer a contraction.

Every random choice (QSGD's rounding, the rotation's signs, random-k's indices) comes from a generator
keyed by (seed, ``compress``, round, client), the mechanism that keys every client's local training, so a
run is deterministic on any number of processes and resumes bit for bit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from typing import Annotated, Literal, NamedTuple

import torch

from fedlight.compression import codecs
from fedlight.config.checks import fraction as unit_fraction, positive
from fedlight.seeding import torch_generator

State = dict[str, torch.Tensor]
Kind = Literal["none", "fp16", "bf16", "qsgd", "topk", "randk"]
RESIDUAL = "compress.residual."  # the client-store keys of error feedback's residual, one per compressed tensor
CASTS = {"fp16": torch.float16, "bf16": torch.bfloat16}
# the options that act only with some kinds, for the one-line refusal of the others
KIND_OPTIONS = {"bits": ("qsgd",), "block": ("qsgd",), "rotate": ("qsgd",), "fraction": ("topk", "randk")}


def tally(rows: Iterable[codecs.Rows]) -> dict[str, int]:
    """The bytes of several tensors' ``rows``, summed by ledger dtype."""
    sent: dict[str, int] = defaultdict(int)
    for dtype, n in (row for tensor in rows for row in tensor):
        sent[dtype] += n
    return dict(sent)


def compressed(key: str, value: torch.Tensor, global_state: State, parameters: Collection[str] | None) -> bool:
    """Whether ``value`` is a tensor of the model's update that is compressed: floating point, the global
    state's, and a trainable parameter (every floating-point tensor where ``parameters`` is None)."""
    start = global_state.get(key)
    return (value.is_floating_point() and start is not None and start.shape == value.shape
            and (parameters is None or key in parameters))


def bit_width(v: int) -> str | None:
    """Bits of a quantized level: 1 to 16."""
    return None if 1 <= v <= 16 else "must be in 1..16"


class Upload(NamedTuple):
    """What one client's compressed upload gives the server, and what it leaves the client.

    Attributes:
        payload: the model the server rebuilds (x_t + decoded update), the payload's keys, shapes and dtypes.
        sent: bytes sent by ledger dtype.
        residual: error feedback's new residual, keyed ``RESIDUAL + name`` (empty without it).
    """

    payload: State
    sent: dict[str, int]
    residual: State


class UpdateCompression:
    """How clients compress their uploads (module docstring).

    Args:
        kind: ``none`` (the model as it is, bit for bit), ``fp16`` / ``bf16`` (a cast), ``qsgd`` (stochastic
            quantization), ``topk`` / ``randk`` (sparsification).
        bits: b, qsgd's bits of level an entry (1..16; plus a sign bit).
        block: qsgd's entries a scale (None: one scale a tensor); a power of two with ``rotate``.
        rotate: qsgd after a random Walsh-Hadamard rotation (Suresh et al. 2017).
        fraction: topk / randk's share of each tensor's entries sent, in (0, 1].
        error_feedback: each client keeps what it did not send and adds it to its next update.
        seed: the run seed (the engine's).
    """

    options_key = "server.compress"  # where a recipe sets the options, for messages

    def __init__(self, kind: Kind = "none", bits: Annotated[int, bit_width] = 8,
                 block: Annotated[int, positive] | None = None, rotate: bool = False,
                 fraction: Annotated[float, unit_fraction] = 0.01, error_feedback: bool = False, seed: int = 0) -> None:
        self.kind, self.bits, self.block, self.rotate, self.fraction = kind, bits, block, rotate, fraction
        self.error_feedback, self.seed = error_feedback, seed

    @property
    def keeps_state(self) -> bool:
        """Whether a client keeps state for it (error feedback's residual)."""
        return self.error_feedback

    def compress(self, payload: State, global_state: State, round_: int, client: int,
                 stored: State | None = None, parameters: Collection[str] | None = None) -> Upload:
        """``client``'s upload in ``round_`` from its ``payload`` (the model it trained, from ``global_state``)
        and its ``stored`` client state (error feedback's residual, under ``RESIDUAL``); ``parameters``: the
        names of the model's trainable parameters, the tensors compressed (None: every floating-point one)."""
        if self.kind == "none":
            return Upload(payload, tally(codecs.cast_rows(v.numel(), v.dtype) for v in payload.values()), {})
        generator, stored = torch_generator(self.seed, "compress", round_, client), stored or {}
        out, sent, residual = dict(payload), [], {}
        for key, value in payload.items():
            if not compressed(key, value, global_state, parameters):
                sent.append(codecs.cast_rows(value.numel(), value.dtype))
                continue
            start = global_state[key].detach().cpu().double()
            update = value.detach().cpu().double() - start
            if self.error_feedback and RESIDUAL + key in stored:
                update = update + stored[RESIDUAL + key].double()
            decoded, rows = self._encode(update, value.dtype, generator)
            out[key] = (start + decoded).to(value.device, value.dtype)
            sent.append(rows)
            if self.error_feedback:
                residual[RESIDUAL + key] = (update - decoded).float()
        return Upload(out, tally(sent), residual)

    def _encode(self, update: torch.Tensor, dtype: torch.dtype, generator: torch.Generator) -> codecs.Sent:
        """One tensor's ``update`` (float64) as the server decodes it, values sent in ``dtype``."""
        if self.kind in CASTS:
            return codecs.cast(update, CASTS[self.kind])
        if self.kind == "qsgd":
            return codecs.qsgd(update, self.bits, self.block, self.rotate, generator, self.error_feedback)
        if self.kind == "topk":
            return codecs.top_k(update, self.fraction, dtype)
        return codecs.random_k(update, self.fraction, dtype, not self.error_feedback, generator)

    def upload_bytes(self, state: State, parameters: Collection[str] | None = None) -> int:
        """The bytes a client uploads for a payload shaped as ``state`` with these ``parameters`` compressed (the
        virtual clock's upload, known before anyone trains; the ledger counts the same)."""
        return sum(n for key, tensor in state.items()
                   for _, n in self._rows(tensor, compressed(key, tensor, state, parameters)))

    def _rows(self, value: torch.Tensor, compress: bool) -> codecs.Rows:
        n = value.numel()
        if self.kind == "none" or not compress:
            return codecs.cast_rows(n, value.dtype)
        if self.kind in CASTS:
            return codecs.cast_rows(n, CASTS[self.kind])
        if self.kind == "qsgd":
            return codecs.qsgd_rows(n, self.bits, self.block, self.rotate)
        k = codecs.kept(n, self.fraction)
        return codecs.top_k_rows(n, k, value.dtype) if self.kind == "topk" else codecs.cast_rows(k, value.dtype)

    def residual_bytes(self, state: State, parameters: Collection[str] | None = None) -> int:
        """What error feedback keeps per client for a model shaped as ``state``: a float32 residual of each
        compressed tensor (0 without it)."""
        if not self.error_feedback:
            return 0
        return sum(v.numel() * 4 for k, v in state.items() if compressed(k, v, state, parameters))
