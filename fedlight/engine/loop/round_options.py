"""The round loop's own typed options (its parts take theirs in their constructors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fedlight.compression.update_compression import UpdateCompression
from fedlight.errors import UserError
from fedlight.eval.collapse import CollapseAlarm


@dataclass(frozen=True)
class RoundOptions:
    """What the loop itself needs: rounds, sampling, evaluation cadence, learning rate, workers.

    Attributes:
        rounds: R, the run's rounds.
        seed: run seed (client sampling, local generators).
        fraction: share of the trainable clients sampled each round.
        poisson: sample each client independently (``sampling.sample_clients``), not a fixed-size set.
        eval_every: evaluate every N rounds (and after the last).
        lr, lr_schedule, lr_decay: the local learning rate and its per-round schedule.
        workers: worker models per process (clients trained side by side).
        batched_clients: clients a worker trains together as one step (``engine/loop/batched_clients.py``);
            None: one by one.
        projector_samples: test images in the final TensorBoard embedding.
        loggers: where the scalars and hparams go (``fedlight.engine.output.loggers``).
        client_state: the client-state store, ``memory`` or ``disk`` (``store.choose_store``).
        state_cache_mb: the disk store's cache bound in MiB.
        checkpoint_every: write the checkpoint every N rounds (and after the last, and before any stop).
        collapse: the collapse alarm's thresholds, patience and whether it stops the run.
        compression: how clients compress their uploads (``server.compress``); None: they send their model.
        record: the resolved recipe as a plain mapping, written to results.json and TensorBoard
            as it is; the loop never reads it.
    """

    rounds: int
    seed: int = 0
    fraction: float = 1.0
    poisson: bool = False
    eval_every: int = 1
    lr: float = 1e-3
    lr_schedule: Literal["constant", "cosine", "exponential"] = "constant"
    lr_decay: float = 0.0
    workers: int = 1
    batched_clients: int | None = None
    projector_samples: int = 0
    loggers: tuple[str, ...] = ("tensorboard",)
    client_state: Literal["memory", "disk"] = "memory"
    state_cache_mb: int = 256
    checkpoint_every: int = 1
    collapse: CollapseAlarm = CollapseAlarm()
    compression: UpdateCompression | None = None
    record: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.lr_decay and self.lr_schedule != "exponential":
            raise UserError(f"local.lr_decay={self.lr_decay} applies to local.lr_schedule=exponential only (got "
                            f"{self.lr_schedule}); set local.lr_schedule=exponential or drop local.lr_decay")
