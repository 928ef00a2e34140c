"""What FLESD clients send instead of weights: public-set similarities, optionally compressed.

A client embeds the N public images (unit-length projections Z, N x d) and sends either
the similarity matrix S = Z Z^T (N x N) or Z itself, in float32, float16 or int8
(symmetric, one float32 scale), and for similarities optionally only the top p% entries
of each row (values + int32 column indices). The server decodes any of these back to S;
entries that were not sent become -inf, i.e. zero weight in the ensemble.
"""

from __future__ import annotations

import math

import torch

State = dict[str, torch.Tensor]


def _quantize(x: torch.Tensor, dtype: str) -> State:
    if dtype == "float32":
        return {"values": x.float()}
    if dtype == "float16":
        return {"values": x.half()}
    scale = x.abs().amax().clamp_min(1e-12).float() / 127
    return {"values": (x / scale).round().clamp(-127, 127).to(torch.int8), "scale": scale.reshape(1)}


def _dequantize(msg: State) -> torch.Tensor:
    values = msg["values"].float()
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
    if payload == "embeddings":
        return _quantize(embeddings, dtype)
    sim = embeddings @ embeddings.T
    if topk_percent >= 100:
        return _quantize(sim, dtype)
    k = max(1, math.ceil(sim.shape[1] * topk_percent / 100))
    values, index = sim.topk(k, dim=1)
    return {**_quantize(values, dtype), "index": index.to(torch.int32)}


def decode(msg: State, n: int) -> torch.Tensor:
    """The (n, n) similarity matrix a message stands for (-inf where nothing was sent)."""
    values = _dequantize(msg)
    if "index" in msg:
        sim = torch.full((n, n), float("-inf"), device=values.device)
        return sim.scatter_(1, msg["index"].long(), values)
    if values.shape == (n, n):
        return values
    return values @ values.T  # embeddings


def ensemble_term(sim: torch.Tensor, tau_t: float) -> torch.Tensor:
    """A_k[i, j] = exp((S_k[i, j] - max_l S_k[i, l]) / tau_T) (FLESD eq. 5), shape (N, N)."""
    return torch.exp((sim - sim.amax(dim=1, keepdim=True)) / tau_t)
