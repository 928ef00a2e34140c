"""Ensemble similarity distillation (FLESD eq. 7-10): the key queue, the target and the loss, as tensor math.

How many steps an ESD epoch takes is the aggregator's (``fedlight.server.flesd.esd_steps_per_epoch``), which
checks it against the public set before a run; this module is what the engine's distiller steps on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class KeyQueue:
    """A FIFO of momentum-encoder keys with the public index each key belongs to (MoCo style).

    Args:
        size: queue length Q (2048 in FLESD).
        dim: key dimension d.
    """

    def __init__(self, size: int, dim: int, device: torch.device | str = "cpu") -> None:
        self.keys = torch.zeros(size, dim, device=device)
        self.index = torch.full((size,), -1, dtype=torch.long, device=device)
        self.size, self.filled, self.ptr = size, 0, 0

    def push(self, keys: torch.Tensor, index: torch.Tensor) -> None:
        """Enqueue (B, d) keys and their (B,) public indices, dropping the oldest."""
        for start in range(0, len(keys), self.size):
            k, i = keys[start:start + self.size], index[start:start + self.size]
            pos = (self.ptr + torch.arange(len(k), device=k.device)) % self.size
            self.keys[pos], self.index[pos] = k.detach(), i
            self.ptr = (self.ptr + len(k)) % self.size
            self.filled = min(self.size, self.filled + len(k))

    def contents(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The (filled, d) keys and (filled,) indices currently held."""
        if self.filled < self.size:
            return self.keys[: self.filled], self.index[: self.filled]
        return self.keys, self.index


def target_distribution(ensemble: torch.Tensor, rows: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """p_ij = A[i, idx_j] / sum_j' A[i, idx_j'] (FLESD eq. 8), shape (B, Q); rows sum to one."""
    a = ensemble[rows][:, anchors]
    return a / a.sum(dim=1, keepdim=True).clamp_min(1e-12)


def distillation_loss(queries: torch.Tensor, keys: torch.Tensor, target: torch.Tensor, tau_s: float) -> torch.Tensor:
    """Cross-entropy between the target and the student's softmax(q k^T / tau_S) (= KL up to a constant).

    Args:
        queries: (B, d) unit-length student embeddings.
        keys: (Q, d) queued momentum keys.
        target: (B, Q) target distribution.
    """
    log_p = F.log_softmax(queries @ keys.T / tau_s, dim=1)
    return -(target * log_p).sum(dim=1).mean()
