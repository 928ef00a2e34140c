"""A round's training timed on its own: ``Federation.run_round``'s ``TRAINING_STEPS`` (from the round's
start to its new global model), without the evaluation, history, checkpoint and logs that follow them.

The benchmarks that compare the engine's round with a plain loop (``engine_overhead.py``) or count its
time per client (``micro.py``) run the real round (``run_round``) with evaluation off and time only
those steps, so they measure what they did when a round's training was one method.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from fedlight.engine.loop.federation import TRAINING_STEPS, Federation
from fedlight.engine.loop.interfaces import Report
from fedlight.engine.output.progress import RoundBars


def train_rounds(fed: Federation, rounds: int) -> list[tuple[float, list[Report]]]:
    """Run ``fed``'s first ``rounds`` rounds without evaluating; per round, the seconds its training steps
    took and its client reports (every rank's, by client)."""
    fed.options = replace(fed.options, eval_every=rounds + 1, rounds=max(fed.options.rounds, rounds + 1))
    bars = RoundBars(0, fed.options.rounds, enabled=False)
    out = []
    for round_ in range(rounds):
        spent, returned = [0.0], {}
        for name in TRAINING_STEPS:  # shadows the class's step on this instance for the round
            setattr(fed, name, _timed(getattr(fed, name), name, spent, returned))
        fed.run_round(round_, bars)
        for name in TRAINING_STEPS:
            delattr(fed, name)
        out.append((spent[0], returned["_collect_reports"][1]))
    return out


def _timed(step: Any, name: str, spent: list[float], returned: dict[str, Any]) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            returned[name] = step(*args, **kwargs)
            return returned[name]
        finally:
            spent[0] += time.perf_counter() - start
    return wrapper
