"""A round's training timed on its own: ``Federation.run_round``'s ``TRAINING_STEPS`` (from the round's
start to its new global model), without the evaluation, history, checkpoint and logs that follow them.

The benchmarks that compare the engine's round with a plain loop (``engine_overhead.py``) or count its
time per client (``micro.py``) run the real round (``run_round``) with evaluation off and time only
those steps, so they measure what they did when a round's training was one method.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from fedlight import registry
from fedlight.config import load_recipe

from fedlight.engine.loop.federation import TRAINING_STEPS, Federation
from fedlight.engine.loop.interfaces import Report
from fedlight.engine.output.progress import RoundBars
from fedlight.engine.run.assemble import build_federation
from fedlight.engine.run.fit import build_module, make_fabric, prepare_data

CROSS_DEVICE = Path(__file__).resolve().parent / "workloads/cross_device_fmnist.yaml"


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


def cross_device_federation(overrides: list[str], threads: int) -> Federation:
    """The cross-device workload (``workloads/cross_device_fmnist.yaml``) with ``overrides``, built as a run
    builds it (``assemble.build_federation``), on the CPU with ``threads`` torch threads, in a scratch folder."""
    recipe = load_recipe(CROSS_DEVICE, ["fabric.accelerator=cpu", f"fabric.threads={threads}",
                                        "eval.projector_samples=0", *overrides])
    data, parts = prepare_data(recipe)
    return build_federation(make_fabric(recipe), recipe, data, parts, build_module(recipe, data),
                            registry.build_server(recipe.server, recipe.clients.num), Path(tempfile.mkdtemp()))


def timed(methods: list[tuple[object, str, float]]) -> tuple[list[float], list[tuple[object, str, object]]]:
    """Wrap each (owner, method, sign) to add sign x its CPU seconds to a counter; the counter and what to
    put back (``restore``)."""
    spent, patched = [0.0], []
    for owner, name, sign in methods:
        original = getattr(owner, name)

        def wrapper(*args, _original=original, _sign=sign, **kwargs):
            start = time.process_time()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[0] += _sign * (time.process_time() - start)
        setattr(owner, name, wrapper)
        patched.append((owner, name, original))
    return spent, patched


def restore(patched: list[tuple[object, str, object]]) -> None:
    """Put back the methods ``timed`` wrapped."""
    for owner, name, original in patched:
        setattr(owner, name, original)


def take_turns(sides: list[str], repeats: int, measure: Callable[[str], tuple[float, ...]],
               say: Callable[[int, str, tuple[float, ...]], None]) -> dict[str, list[tuple[float, ...]]]:
    """Each side measured once a repeat (``measure(side)``), in turn, the order reversed every other repeat
    so that no side always runs first; ``say(repeat, side, measured)`` after each; per side, its measurements."""
    out: dict[str, list[tuple[float, ...]]] = {side: [] for side in sides}
    for repeat in range(repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            out[side].append(measure(side))
            say(repeat + 1, side, out[side][-1])
    return out


def medians(measured: dict[str, list[tuple[float, ...]]], base: str, names: tuple[str, ...]) -> dict[str, dict]:
    """Per side of ``take_turns``' ``measured``: the median of each measurement, named by ``names`` (the first,
    seconds a client, as ``ms_per_client``, with ``ratio_to_<base>``, its ratio to side ``base``'s), and each
    repeat's ms (``runs_ms``)."""
    ms = {side: [m[0] * 1000 for m in runs] for side, runs in measured.items()}
    base_ms = statistics.median(ms[base])
    return {side: {"ms_per_client": statistics.median(ms[side]),
                   f"ratio_to_{base}": statistics.median(ms[side]) / base_ms,
                   **{name: statistics.median(m[i] for m in runs) for i, name in enumerate(names) if i},
                   "runs_ms": ms[side]}
            for side, runs in measured.items()}


def sides_parser(description: str, clients: int, threads: int) -> argparse.ArgumentParser:
    """The options every side-by-side benchmark takes: clients a side and repeat, repeats, threads, --json."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--clients", type=int, default=clients, help="clients trained per side and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--json", type=Path)
    return parser


def write_summary(summary: dict[str, dict], line: Callable[[str, dict], str], path: Path | None) -> None:
    """Print ``line(side, medians)`` for each side of ``medians``' summary, and write it as JSON to ``path``."""
    for side, values in summary.items():
        print(line(side, values))
    if path is not None:
        path.write_text(json.dumps(summary, indent=2))
