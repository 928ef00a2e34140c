"""Coordinate-wise median and trimmed mean (Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust
Distributed Learning: Towards Optimal Statistical Rates", ICML 2018, Algorithms 1 and 2)."""

from __future__ import annotations

import math
from typing import Annotated

import torch

from fedlight.config.checks import below_half
from fedlight.errors import UserError
from fedlight.server import robust_ops
from fedlight.server.ops import cast_like, stack_states
from fedlight.server.aggregator import Aggregator, ClientPayload, State


class CoordinateRule(Aggregator):
    """A payloads-contract server that combines each coordinate of the clients' states on its own.

    Every client counts once (the papers' rules take no weights); integer buffers are rounded
    back (e.g. BatchNorm's ``num_batches_tracked``).
    """

    needs_payloads = True

    def combine(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, ...)`` client values -> ``(...)``."""
        raise NotImplementedError

    def finalize(self, global_state: State, payloads: list[ClientPayload]) -> State:
        states = [p.payload for p in payloads]
        return {k: cast_like(self.combine(stack_states(states, k)), ref) for k, ref in global_state.items()}


class Median(CoordinateRule):
    """Coordinate-wise median (Yin et al. 2018, Algorithm 1): robust while fewer than half the
    clients of a round are Byzantine; the mean of the two middle values for an even count."""

    def combine(self, x: torch.Tensor) -> torch.Tensor:
        return robust_ops.coordinate_median(x)


class TrimmedMean(CoordinateRule):
    """Coordinate-wise trimmed mean (Yin et al. 2018, Algorithm 2): each coordinate drops its
    ``floor(trim * n)`` largest and smallest values among the n answering clients and averages the
    rest; it tolerates a Byzantine share below ``trim``.

    Args:
        trim: beta, the share dropped from each side, in [0, 0.5) (0.1).
    """

    def __init__(self, trim: Annotated[float, below_half] = 0.1) -> None:
        self.trim = trim

    def check_clients(self, per_round: int, population: int) -> None:
        if self.trim > 0 and math.floor(self.trim * per_round) == 0:
            raise UserError(f"server.trim={self.trim} trims floor({self.trim} x {per_round}) = 0 of the {per_round} "
                            f"clients a round samples (a plain mean); raise server.trim to at least "
                            f"{1 / per_round:.3g} or sample more clients")

    def combine(self, x: torch.Tensor) -> torch.Tensor:
        return robust_ops.trimmed_mean(x, math.floor(self.trim * x.shape[0]))
