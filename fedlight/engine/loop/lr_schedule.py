"""The local learning rate of a round under ``local.lr_schedule``."""

from __future__ import annotations

import math
from typing import Literal


def round_lr(lr: float, schedule: Literal["constant", "cosine", "exponential"], decay: float, rounds: int,
             round_: int, phase_start: int = 0) -> float:
    """``lr`` in (0-based) ``round_`` of a ``rounds``-round run.

    The schedule counts t rounds from the start of the method's current phase, ``phase_start``
    (0, or the round LG-FedAvg left its FedAvg phase: the paper's LG runs start from a FedAvg
    checkpoint at the initial learning rate, and its Table 6 lists the decay of each run):

    * ``constant``: ``lr``;
    * ``cosine``: ``lr / 2 * (1 + cos(pi t / T))`` over the phase's T rounds (FedU / FedEMA);
    * ``exponential``: ``lr * (1 - decay)^t``: LG-FedAvg's Table 6 "learning rate decay
      0.005" (CIFAR-10) read as its authors' code applies ``lr_decay``, a factor per round
      (``lr *= 0.995`` after every round).
    """
    t = round_ - phase_start
    if schedule == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * t / max(rounds - phase_start, 1)))
    if schedule == "exponential":
        return lr * (1 - decay) ** t
    return lr
