"""TensorBoard's view of a run on the virtual clock (docs/time.md): each accuracy against virtual seconds and
against the client updates applied as well as rounds, the clock's own scalars, and the staleness of the updates an asynchronous server applied."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

ACCURACIES = ("linear_probe_acc", "knn_acc", "test_acc")  # the evaluator's metrics (and their label fractions)
TIME_TAG = "vs_virtual_seconds"  # tag group of the curves whose x axis (TensorBoard's step) is virtual seconds
UPDATES_TAG = "vs_updates_applied"  # ... and those whose x axis is the client updates the server applied so far


def draw_time_curves(logger: Any, row: dict[str, Any]) -> None:
    """Draw ``row``'s accuracies at step = its virtual seconds (``TIME_TAG/<metric>``) and at step = the
    updates applied so far (``UPDATES_TAG/<metric>``)."""
    for key, value in row.items():
        if key.startswith(ACCURACIES) and value is not None:
            logger.experiment.add_scalar(f"{TIME_TAG}/{key}", value, int(round(row["virtual_seconds"])))
            logger.experiment.add_scalar(f"{UPDATES_TAG}/{key}", value, row["updates_total"])


def redraw_time_curves(logger: Any, history: Sequence[dict[str, Any]]) -> None:
    """After a resume, the kept rounds' points again: TensorBoard's ``purge_step`` (rounds done + 1) drops,
    on reading, every earlier event at a step at or above it, whatever its tag, and these curves' steps are
    seconds and update counts, far above the round; points drawn after the purge mark stay."""
    for row in history:
        if "virtual_seconds" in row:
            draw_time_curves(logger, row)


def log_time(logger: Any, row: dict[str, Any]) -> dict[str, float]:
    """Draw ``row``'s time curves (``draw_time_curves``); return the clock's scalars for the round's step:
    virtual hours, the round's virtual seconds and the clients' idle share."""
    draw_time_curves(logger, row)
    return {"clock/virtual_hours": row["virtual_seconds"] / 3600, "clock/idle_share": row["idle_share"],
            **({"clock/round_virtual_seconds": row["round_virtual_seconds"]} if "round_virtual_seconds" in row else {})}


def log_staleness(logger: Any, step: int, staleness: list[int]) -> None:
    """The histogram of the staleness (model versions) of the updates a server step applied."""
    if staleness:
        logger.experiment.add_histogram("async/staleness", np.asarray(staleness, dtype=np.float64), step)


def updates_total(history: list[dict[str, Any]], now: int) -> int:
    """The client updates the server applied up to this round: ``now`` plus the history's ``updates_applied``."""
    return now + sum(row.get("updates_applied") or 0 for row in history)
