"""The aggregator's own metrics (``Aggregator.metrics``, e.g. DP-FedAvg's epsilon) in the history and TensorBoard."""

from __future__ import annotations

from typing import Any

from fedlight.engine.loop.interfaces import Report, RoundPlugin
from fedlight.server.aggregator import Aggregator


class ServerMetrics(RoundPlugin):
    """Adds ``aggregator.metrics(rounds done)`` to each round's history row and as ``server/<name>`` scalars.

    Args:
        aggregator: the run's server (its metrics read its state after the round's ``finalize``).
    """

    def __init__(self, aggregator: Aggregator) -> None:
        self.aggregator = aggregator
        self.names = tuple(aggregator.metrics(0))

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        return self.aggregator.metrics(round_ + 1)

    def log_round(self, logger: Any, row: dict[str, Any]) -> dict[str, float]:
        return {f"server/{k}": row[k] for k in self.names if row.get(k) is not None}
