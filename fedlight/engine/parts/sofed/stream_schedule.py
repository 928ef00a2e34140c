"""SOFed's client schedule (Algorithm 1): the client's data arrives as a stream through a replay buffer.

Each round ``stream.velocity`` samples arrive (a stream of ``stream.stc`` sample-sized
segments, ``fedlight.data.streams``); each arriving batch updates the client's fixed-size
buffer under ``buffer.policy`` and one step trains on the buffer. The buffer (ids and scores)
is the client's state between rounds. Shows the share of new samples dropped at once, the
share of buffered samples re-scored, the milliseconds of selection per arriving batch,
a picture of every client's buffer classes and a histogram of the buffers' importance scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from lightning.fabric import Fabric

from fedlight.engine.parts.sofed.buffer import ReplayBuffer
from fedlight.data.streams import arrival_batches, segment
from fedlight.data.views import ViewMaker
from fedlight.engine.loop.client_faults import steps_done
from fedlight.engine.loop.interfaces import ClientSchedule, ClientWork, Report, ScheduleContext, State
from fedlight.engine.output.tensorboard import partition_figure
from fedlight.engine.parts.sofed.stream_loop import BufferOptions, train_client_stream
from fedlight.errors import UserError
from fedlight.methods.federated_module import FederatedModule
from fedlight.seeding import numpy_rng

BUFFER = "buffer."  # store keys of a streaming client's replay buffer


@dataclass(frozen=True)
class StreamOptions:
    """How a client's data streams in (SOFed, Algorithm 1).

    Attributes:
        velocity: samples arriving per round.
        stc: length of a run of same-class samples (the sequential temporal correlation; SOFed: 500).
        buffer: the replay buffer the stream passes through.
    """

    velocity: int
    stc: int = 500
    buffer: BufferOptions = field(default_factory=BufferOptions)

    def __post_init__(self) -> None:
        if self.velocity < 1 or self.stc < 1:
            raise UserError(f"stream.velocity={self.velocity} and stream.stc={self.stc} must be >= 1; "
                            "e.g. 1000 and 500")


class StreamSchedule(ClientSchedule):
    """SOFed's rounds: a stream's next ``velocity`` samples through a replay buffer, a step a batch.

    Args:
        fabric: devices and precision.
        images: (N, C, H, W) uint8 images on the device.
        labels: (N,) labels on the device.
        train_labels: (N,) labels on the CPU (stream segments follow classes; measurement).
        parts: every client's sample indices.
        views: batched augmentation.
        options: velocity, segment size and replay buffer.
        num_classes: C (the buffer-classes picture).
        seed: run seed (stream order).
    """

    keeps_clients = True
    state_prefix = BUFFER
    batch_refusal = "each client's next batch comes from its replay buffer, rescored and replaced after every step"

    def __init__(self, fabric: Fabric, images: torch.Tensor, labels: torch.Tensor, train_labels: np.ndarray,
                 parts: list[torch.Tensor], views: ViewMaker, options: StreamOptions, num_classes: int = 10,
                 seed: int = 0) -> None:
        self.fabric, self.images, self.labels, self.train_labels = fabric, images, labels, train_labels
        self.parts, self.views, self.options, self.buffer = parts, views, options, options.buffer
        self.num_classes, self.seed = num_classes, seed

    @classmethod
    def from_context(cls, context: ScheduleContext) -> StreamSchedule:
        """``local.schedule=stream``: the stream and replay buffer of ``context.options.stream``."""
        c = context
        return cls(c.fabric, c.images, c.labels, c.train_labels, c.parts, c.views, c.options.stream, c.num_classes,
                   c.seed)

    def train(self, module: FederatedModule, client: int, round_: int, generator: torch.Generator,
              private: State, work: float) -> ClientWork:
        saved = {k[len(BUFFER):]: v for k, v in private.items() if k.startswith(BUFFER)}
        size = self.buffer.size
        buffer = ReplayBuffer.from_state(size, saved) if saved else ReplayBuffer(size)
        samples = segment(self.train_labels, self.parts[client].numpy(), self.options.stc,
                          lambda p: numpy_rng(self.seed, "stream", client, p), round_, self.options.velocity)
        arrivals = [torch.as_tensor(b) for b in arrival_batches(samples, size)]
        if work < 1:  # a straggler: the first arrivals only
            arrivals = arrivals[:steps_done(len(arrivals), work)]
            samples = samples[:sum(len(a) for a in arrivals)]
        result, stats = train_client_stream(self.fabric, module, self.images, self.labels, arrivals, buffer,
                                            self.buffer, self.views, generator)
        classes = np.bincount(self.train_labels[buffer.ids.numpy()], minlength=self.num_classes).tolist()
        report = {"buffer": vars(stats), "buffer_classes": classes}
        if self.buffer.policy == "importance":  # only its scores are scores: the others hold zeros
            report["buffer_scores"] = buffer.scores.tolist()
        return ClientWork(result, float(len(samples)), report, {BUFFER + k: v for k, v in buffer.state_dict().items()})

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        """Share of new samples dropped at once, share of buffered samples re-scored, milliseconds
        of buffer selection per arriving batch, and every trained client's buffer classes."""
        reports = [rep for rep in reports if "buffer" in rep]
        if not reports:
            return {}
        total = {k: sum(rep["buffer"][k] for rep in reports) for k in reports[0]["buffer"]}
        return {"buffer_dropped_new": total["dropped_new"] / max(total["new"], 1),
                "buffer_rescored": total["rescored"] / max(total["buffered"], 1),
                "buffer_select_ms": 1000 * total["seconds"] / max(total["batches"], 1),
                "buffer_classes": [rep["buffer_classes"] for rep in reports]}

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        if "buffer_classes" not in row:
            return {}
        logger.experiment.add_figure("stream/buffer_classes",
                                     partition_figure(np.array(row["buffer_classes"]), "buffer classes"), row["round"])
        return {"stream/dropped_new": row["buffer_dropped_new"], "stream/rescored": row["buffer_rescored"],
                "stream/select_ms_per_batch": row["buffer_select_ms"]}

    def log_clients(self, logger: Any, round_: int, reports: list[Report]) -> None:
        """The distribution of the importance scores the trained clients' buffers hold after the
        round (SOFed eq. 3, each as last computed; with ``buffer.lazy_interval`` > 1 some are older)."""
        scores = [x for rep in reports if rep["status"] == "ok" for x in rep.get("buffer_scores", ())]
        if scores:
            logger.experiment.add_histogram("stream/importance_scores", np.asarray(scores), round_)

    def option_keys(self) -> tuple[str, ...]:
        """``stream.*``, the buffer's size and policy, and the importance policy's own keys when it is the policy."""
        own = ("buffer.lazy_interval", "buffer.score") if self.buffer.policy == "importance" else ()
        return ("stream", "buffer.size", "buffer.policy", *own)
