"""What FLESD clients send instead of weights: public-set similarities, optionally compressed.

A client embeds the N public images (unit-length projections Z, N x d) and sends either
the similarity matrix S = Z Z^T (N x N) or Z itself, in float32, float16 or int8
(symmetric, one float32 scale), and for similarities optionally only the top p% entries
of each row (values + int32 column indices). The server decodes any of these back to S;
entries that were not sent become -inf, i.e. zero weight in the ensemble.

A message names its kind by the key of its values tensor (``similarity`` or ``embeddings``),
so the kind travels with the payload and is never guessed from a shape: an N x d embedding
matrix with d == N (projection 128, 128 public images) is still decoded as embeddings. The
key costs no bytes on the ledger, which counts tensors only.
"""

from __future__ import annotations

import math

import torch

State = dict[str, torch.Tensor]
KINDS = ("similarity", "embeddings")  # payload kinds, each the key of its message's values tensor


def _quantize(x: torch.Tensor, dtype: str, kind: str) -> State:
    if dtype == "float32":
        return {kind: x.float()}
    if dtype == "float16":
        return {kind: x.half()}
    scale = x.abs().amax().clamp_min(1e-12).float() / 127
    return {kind: (x / scale).round().clamp(-127, 127).to(torch.int8), "scale": scale.reshape(1)}


def payload_kind(msg: State) -> str:
    """The kind a message declares: the one key of ``KINDS`` it holds.

    Raises:
        ValueError: the message names no kind, or both.
    """
    kinds = [k for k in KINDS if k in msg]
    if len(kinds) != 1:
        raise ValueError(f"a FLESD message names its kind by exactly one key of {KINDS}; got keys {sorted(msg)}")
    return kinds[0]


def _dequantize(msg: State, kind: str) -> torch.Tensor:
    values = msg[kind].float()
    return values * msg["scale"] if "scale" in msg else values


def encode(embeddings: torch.Tensor, payload: str = "similarity", dtype: str = "float32",
           topk_percent: float = 100.0) -> State:
    """The client's message for unit-length public embeddings (N, d).

    Args:
        embeddings: (N, d) unit-length projections of the public set.
        payload: ``similarity`` (N x N) or ``embeddings`` (N x d).
        dtype: ``float32``, ``float16`` or ``int8``.
        topk_percent: for similarities, the share of each row to keep (100 keeps all).
    """
    if payload not in KINDS:
        raise ValueError(f"payload must be one of {KINDS}, got {payload!r}")
    if payload == "embeddings":
        return _quantize(embeddings, dtype, payload)
    sim = embeddings @ embeddings.T
    if topk_percent >= 100:
        return _quantize(sim, dtype, payload)
    k = max(1, math.ceil(sim.shape[1] * topk_percent / 100))
    values, index = sim.topk(k, dim=1)
    return {**_quantize(values, dtype, payload), "index": index.to(torch.int32)}


def decode(msg: State, n: int) -> torch.Tensor:
    """The (n, n) similarity matrix a message stands for (-inf where nothing was sent).

    The message's kind key says how to read it (``payload_kind``); its shape is only checked.
    """
    kind = payload_kind(msg)
    values = _dequantize(msg, kind)
    if kind == "embeddings":
        if values.dim() != 2 or len(values) != n:
            raise ValueError(f"embeddings payload of shape {tuple(values.shape)} for {n} public images")
        return values @ values.T
    if "index" in msg:
        sim = torch.full((n, n), float("-inf"), device=values.device)
        return sim.scatter_(1, msg["index"].long(), values)
    if values.shape != (n, n):
        raise ValueError(f"similarity payload of shape {tuple(values.shape)} for {n} public images")
    return values


def ensemble_term(sim: torch.Tensor, tau_t: float) -> torch.Tensor:
    """A_k[i, j] = exp((S_k[i, j] - max_l S_k[i, l]) / tau_T) (FLESD eq. 5), shape (N, N)."""
    return torch.exp((sim - sim.amax(dim=1, keepdim=True)) / tau_t)
