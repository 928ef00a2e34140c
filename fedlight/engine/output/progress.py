"""The run's progress (rank 0): what it is doing now, how far it is, and how long is left.

On a terminal there are bars: one over the rounds, one over each round's clients (with the
round's optimizer steps and the run's ETA beside it) and one over an evaluation's parts (the
features, the linear probe, the kNN vote). Off a terminal (a SLURM log, a pipe, ``fedlight sweep
--executor local``'s log files) a carriage-return bar turns into one long line of overwritten
states, so each round prints one plain line on stdout instead,
``round 3/10: loss 1.2345, linear probe, 10% labels 0.4560, kNN, 10% labels 0.4000; 2.1 s; ETA 1 min``,
and on stderr a line says where the run is whenever ``every`` seconds passed without one (inside
a client, or during an evaluation), so a long round is never silent.

The local loops count their optimizer steps through :func:`step_done` (from the worker threads);
the counter goes to the round's :class:`ClientTicks` while a round runs.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from tqdm.auto import tqdm

from fedlight.engine.output.console import interactive, metrics_text, say
from fedlight.eval import metric_names

HEARTBEAT_SECONDS = 30.0  # off a terminal, the longest silence inside a round or an evaluation
LONG_CPU_RUN_SECONDS = 30 * 60  # a run estimated longer than this on a CPU is announced with its estimate
ESTIMATE_AFTER_STEPS = 20  # optimizer steps (all worker threads together) the estimate is made from

T = TypeVar("T")
_listener: list[Callable[[], None]] = []  # the running round's step counter, if any


def step_done() -> None:
    """Count one optimizer step of a local loop (any worker thread) towards the running round's progress."""
    if _listener:
        _listener[0]()


def duration(seconds: float) -> str:
    """``'45 s'``, ``'12 min'``, ``'3 h 10 min'``: a duration as a person reads an estimate."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min"


class RunClock:
    """Estimates how long the rest of a run takes, from what this process has timed so far.

    A round's length is its measured time once one has finished (their mean); before that, the
    running round's training time extrapolated from the share of its work done (optimizer steps
    when the schedule plans them, else clients), plus its share of an evaluation (the last one
    timed, e.g. the random-init encoder's, over ``eval.every``).

    Args:
        done: rounds completed before this process started (a resumed run).
        total: R, the run's rounds.
        eval_every: ``eval.every``.
        now: the clock (seconds); ``time.perf_counter`` unless a test drives it.
    """

    def __init__(self, done: int, total: int, eval_every: int = 1,
                 now: Callable[[], float] = time.perf_counter) -> None:
        self.total, self.eval_every, self.now = total, max(eval_every, 1), now
        self.rounds_done, self.round_seconds, self.eval_seconds = done, [], 0.0
        self.round_start = now()
        self.clients = self.clients_done = self.steps = self.steps_done = 0

    def start_round(self, clients: int = 0, steps: int = 0) -> None:
        """A round starts that trains ``clients`` here, with ``steps`` planned optimizer steps (0: unknown)."""
        self.round_start, self.clients, self.steps = self.now(), clients, steps
        self.clients_done = self.steps_done = 0

    def round_fraction(self) -> float:
        """The share of the running round's training done (0 .. 1)."""
        if self.steps:
            return min(self.steps_done / self.steps, 1.0)
        return self.clients_done / self.clients if self.clients else 0.0

    def end_round(self, seconds: float) -> None:
        """A round finished in ``seconds`` (training and evaluation); the next one starts now."""
        self.rounds_done += 1
        self.round_seconds.append(seconds)
        self.start_round()

    def remaining(self) -> float | None:
        """Seconds left in the run, or None before anything tells (no round finished, no work done)."""
        elapsed = self.now() - self.round_start
        left_after = max(self.total - self.rounds_done - 1, 0)
        if self.round_seconds:
            mean = sum(self.round_seconds) / len(self.round_seconds)
            return max(mean - elapsed, 0.0) + mean * left_after
        share = self.round_fraction()
        if share <= 0:
            return None
        per_round = elapsed / share + self.eval_seconds / self.eval_every
        return max(per_round - elapsed, 0.0) + per_round * left_after


class ClientTicks:
    """One round's clients bar: ``expect(n)`` once the round knows which clients this process
    trains (a plug-in may add some, e.g. a new device; a resumed round has fewer left), ``plan(steps)``
    when its schedule knows their optimizer steps, then a call per client and a ``step()`` per step.

    Args:
        bar: the tqdm bar (a disabled one when None: benchmarks driving rounds show nothing).
        clock: the run's clock, told the round's work; on_change: called after every client and step.
    """

    def __init__(self, bar: tqdm | None = None, clock: RunClock | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.bar = bar if bar is not None else tqdm(disable=True)
        self.clock = clock if clock is not None else RunClock(0, 1)
        self.on_change = on_change
        self.lock = threading.Lock()
        self.started = 0  # clients begun (a disabled tqdm bar counts nothing)

    def expect(self, clients: int) -> None:
        self.bar.reset(total=clients)
        self.clock.start_round(clients)
        self.started = 0

    def plan(self, steps: int | None) -> None:
        """The optimizer steps this process's clients take this round (None: their schedule cannot tell)."""
        self.clock.steps = steps or 0

    def __call__(self) -> None:
        """A client starts (the bar counts clients begun)."""
        with self.lock:
            self.clock.clients_done = self.started  # the ones begun before it are done (with one worker)
            self.started += 1
            self.bar.update(1)
        self._changed()

    def step(self) -> None:
        with self.lock:
            self.clock.steps_done += 1
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


class RoundBars:
    """Progress over rounds ``done`` .. ``total``, inside each over the clients and steps it trains,
    and over the evaluations, with the run's ETA.

    Args:
        done: rounds already completed (a resumed run starts there).
        total: R, the run's rounds.
        enabled: whether this process shows anything (rank 0).
        label_fraction: ``eval.label_fraction``, named next to the probe and kNN accuracies.
        eval_every: ``eval.every`` (the ETA's share of an evaluation per round).
        on_cpu: the run trains on a CPU (a long estimate is announced after the first steps).
        every: off a terminal, the longest silence (seconds) inside a round or an evaluation.
    """

    def __init__(self, done: int, total: int, enabled: bool = True, label_fraction: float = 1.0,
                 eval_every: int = 1, on_cpu: bool = False, every: float = HEARTBEAT_SECONDS) -> None:
        self.total, self.enabled, self.label_fraction = total, enabled, label_fraction
        self.on_cpu, self.every = on_cpu, every
        self.bars = enabled and interactive()
        self.clock = RunClock(done, total, eval_every)
        self.bar = tqdm(range(done, total), initial=done, total=total, desc="rounds", disable=not self.bars,
                        dynamic_ncols=True)
        self.fresh, self.estimated = done == 0, False
        self.last_line = self.clock.now()
        self.round_ = done
        self.ticks: ClientTicks | None = None

    def __iter__(self) -> Iterator[int]:
        return iter(self.bar)

    def eta(self) -> str:
        left = self.clock.remaining()
        return "?" if left is None else duration(left)

    @contextmanager
    def round(self, round_: int) -> Iterator[ClientTicks]:
        """The (0-based) round's clients bar, as the ticks a trained client calls; the local loops'
        steps (``step_done``) count towards it meanwhile. An exception closes both bars, so a
        stopped run's last line is its message, not a progress bar."""
        self.round_ = round_
        bar = tqdm(total=None, leave=False, desc=f"round {round_ + 1} clients", disable=not self.bars,
                   dynamic_ncols=True)
        self.ticks = ClientTicks(bar, self.clock, self._changed)
        _listener[:] = [self.ticks.step]
        try:
            yield self.ticks
        except BaseException:
            bar.close()
            self.bar.close()
            raise
        finally:
            _listener.clear()
            self.ticks = None
        bar.close()

    def _changed(self) -> None:
        """After a client or a step: the bar's postfix, the long-run estimate, or a line off a terminal."""
        ticks, clock = self.ticks, self.clock
        if ticks is None or not self.enabled:
            return
        if self.fresh and self.on_cpu and not self.estimated and clock.steps_done >= ESTIMATE_AFTER_STEPS:
            self.estimated = True
            left = clock.remaining()
            if left is not None and left > LONG_CPU_RUN_SECONDS:
                pace = (clock.now() - clock.round_start) / clock.steps_done
                say(f"estimated time on this CPU: about {duration(left)} more ({pace:.2f} s an optimizer step over "
                    f"the first {clock.steps_done}); a GPU, fewer rounds or a *_fmnist recipe is quicker")
        steps = f"{clock.steps_done}/{clock.steps}" if clock.steps else str(clock.steps_done)
        if self.bars:
            if clock.now() - self.last_line >= 0.5:
                self.last_line = clock.now()
                ticks.bar.set_postfix_str(f"steps {steps}, run ETA {self.eta()}")  # redrawn: steps come between clients
        elif clock.now() - self.last_line >= self.every:
            self._line(f"round {self.round_ + 1}/{self.total}: client {ticks.started}/{clock.clients}, "
                       f"step {steps}; run ETA {self.eta()}")

    def _line(self, text: str) -> None:
        self.last_line = self.clock.now()
        say(text)

    def evaluate(self, what: str, evaluation: Callable[[Callable[[str], None]], T]) -> T:
        """Run ``evaluation`` of ``what`` (``'the random-init encoder'``, ``'round 3'``), handing it the
        callback each of its parts (features, linear probe, kNN, ...) calls with its name as it starts;
        returns its result. Its time feeds the ETA. A bar naming the part on a terminal; off one, a line
        when it starts if it is the random-init encoder's (the run's first minutes), else after
        ``every`` seconds of silence."""
        bar = tqdm(total=None, leave=False, desc=f"evaluating {what}", disable=not self.bars, dynamic_ncols=True)
        started = self.clock.now()
        if self.enabled and not self.bars and what.startswith("the random-init"):
            self._line(f"evaluating {what} (features, linear probe, kNN) before round 1")

        def part(name: str) -> None:
            bar.update(1)
            bar.set_description_str(f"evaluating {what}: {name}")  # redrawn now: a part takes seconds
            if self.enabled and not self.bars and self.clock.now() - self.last_line >= self.every:
                self._line(f"evaluating {what}: {name}; run ETA {self.eta()}")

        try:
            return evaluation(part)
        finally:
            bar.close()
            self.clock.eval_seconds = self.clock.now() - started

    def show(self, row: dict[str, Any], last_eval: dict[str, Any] | None) -> None:
        """A finished round's history ``row``: its loss and the latest evaluation's (``last_eval``) probe
        on the bar, or one plain line with the metrics it measured and the run's ETA."""
        self.clock.end_round(row["seconds"])
        loss = row.get("train_loss")
        if self.bars:
            probe = (last_eval or {}).get(metric_names.PROBE)
            self.bar.set_postfix(loss=f"{loss:.3f}" if loss is not None else "-",
                                 probe=f"{probe:.3f}" if probe is not None else "-")
        elif self.enabled:
            measured = metrics_text(row, self.label_fraction)
            eta = f"; ETA {self.eta()}" if row["round"] < self.total else ""
            print(f"round {row['round']}/{self.total}: loss {'-' if loss is None else f'{loss:.4f}'}"
                  f"{', ' + measured if measured else ''}; {row['seconds']:.1f} s{eta}", flush=True)
            self.last_line = self.clock.now()

    def close(self) -> None:
        self.bar.close()
