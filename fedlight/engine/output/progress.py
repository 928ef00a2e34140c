"""The run's progress (rank 0): what it is doing now, how far it is, and how long is left.

Every count is of finished work. On a terminal there are bars: one over the rounds (the last
loss and probe, the run's ETA), one over the running round's optimizer steps when its schedule
plans them, else its clients (the other count and the run's ETA beside it), and one over the
running phase of an evaluation (feature batches, L-BFGS evaluations of the linear probe, kNN
chunks; the run's ETA beside it). Off a terminal (a SLURM log, a pipe, ``fedlight sweep
--executor local``'s log files) a carriage-return bar turns into one long line of overwritten
states, so each round prints one plain line on stdout instead,
``round 3/10: loss 1.2345, linear probe, 10% labels 0.4560, kNN, 10% labels 0.4000; 2.1 s; ETA 1 min``,
and on stderr a line says where the run is whenever ``every`` seconds passed without one (inside
a round, or during an evaluation), so a long round is never silent. A resumed run says so first.

The local loops count their optimizer steps through :func:`step_done` (from the worker threads);
the counter goes to the round's :class:`ClientTicks` while a round runs. ``docs/progress_and_tensorboard.md``
shows what each bar and line means.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TextIO, TypeVar

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
    when the schedule plans them, else clients finished), plus its share of an evaluation (the
    last one timed, e.g. the random-init model's, over ``eval.every``).

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
        if self.rounds_done >= self.total:
            return 0.0
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


# every bar: its share, the count of finished units named by their unit ("3/16 steps"), the time
# spent and the postfix (the other count, the run's ETA); tqdm's own rate and phase estimate are
# left out: a rate of evaluation units ("18724.57it/s") tells nothing, the run's ETA tells more
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"


def _bar(desc: str, file: TextIO | None, shown: bool, total: int | None = None, leave: bool = False,
         unit: str = "") -> tqdm:
    return tqdm(total=total, desc=desc, unit=unit, leave=leave, file=file, disable=not shown, dynamic_ncols=True,
                bar_format=BAR_FORMAT)


def _advance(bar: tqdm) -> None:
    """One unit more on ``bar``, never past its total (L-BFGS's line search may go past its plan)."""
    if bar.total is None or bar.n < bar.total:
        bar.update(1)


class ClientTicks:
    """One round's bar over the work this process trains, counting finished work: its optimizer
    steps when the schedule plans them, else its clients, with the other count beside it.

    ``expect(n)`` once the round knows which clients this process trains (a plug-in may add
    some, e.g. a new device; a resumed round has fewer left), ``plan(steps)`` when its schedule
    knows their optimizer steps; then a call per client that finished (trained, dropped out or
    excluded) and a ``step()`` per optimizer step (the local loops, through :func:`step_done`).

    Args:
        bar: the tqdm bar (a disabled one when None: benchmarks driving rounds show nothing).
        clock: the run's clock, told the round's work; on_change: called after every client and
            step, with True after a client.
    """

    def __init__(self, bar: tqdm | None = None, clock: RunClock | None = None,
                 on_change: Callable[[bool], None] | None = None) -> None:
        self.bar = bar if bar is not None else tqdm(disable=True)
        self.clock = clock if clock is not None else RunClock(0, 1)
        self.on_change = on_change
        self.lock = threading.Lock()

    def expect(self, clients: int) -> None:
        self.clock.start_round(clients)
        self._count(clients, "clients")

    def plan(self, steps: int | None) -> None:
        """The optimizer steps this process's clients take this round (None: their schedule cannot tell)."""
        self.clock.steps = steps or 0
        if steps:
            self._count(steps, "steps")

    def _count(self, total: int, unit: str) -> None:
        self.bar.unit = unit  # before reset, which redraws
        self.bar.reset(total=total)

    @property
    def by_steps(self) -> bool:
        """Whether the bar counts optimizer steps (planned), not clients."""
        return self.clock.steps > 0

    def __call__(self) -> None:
        """A client finished."""
        with self.lock:
            self.clock.clients_done += 1
            if not self.by_steps:
                _advance(self.bar)
        self._changed(True)

    def step(self) -> None:
        with self.lock:
            self.clock.steps_done += 1
            if self.by_steps:
                _advance(self.bar)
        self._changed(False)

    def beside(self) -> str:
        """The count the bar does not show: ``'clients 1/4'`` beside steps, ``'steps 37'`` beside clients."""
        clock = self.clock
        if self.by_steps:
            return f"clients {clock.clients_done}/{clock.clients}"
        return f"steps {clock.steps_done}"

    def _changed(self, client: bool) -> None:
        if self.on_change is not None:
            self.on_change(client)


class EvalPhases:
    """What an evaluation tells its bar: each phase as it starts, with the units of work it has
    (``phases("kNN", total=chunks, unit="chunks")``), then ``advance()`` after each unit.

    The phases of an evaluation (``engine/loop/evaluator.py``): the features of the labelled and
    test images (batches), the classifier's test predictions (batches), the linear probe (L-BFGS
    loss evaluations, ``probe_evaluations(steps)`` planned: it often stops sooner), the kNN vote
    (chunks of test images); again per client for local-only training, and per extra label
    fraction. Without a bar it shows nothing.

    Args:
        bar: the evaluation's bar (a disabled one when None); title: its name (``'evaluating round 3'``).
        on_change: called with this object after a phase starts (True) and after each unit (False).
        prefix: put before every phase's name (``'client 2/5, '``).
    """

    def __init__(self, bar: tqdm | None = None, title: str = "evaluating",
                 on_change: Callable[[EvalPhases, bool], None] | None = None, prefix: str = "") -> None:
        self.bar = bar if bar is not None else tqdm(disable=True)
        self.title, self.on_change, self.prefix = title, on_change, prefix
        self.name, self.done = "", 0

    def __call__(self, name: str, total: int | None = None, unit: str = "batches") -> None:
        """Phase ``name`` starts, with ``total`` units of work (None: unknown)."""
        self.name, self.done = self.prefix + name, 0
        self.bar.set_description_str(f"{self.title}: {self.name}", refresh=False)
        self.bar.unit = unit
        self.bar.reset(total=total)  # redraws
        if self.on_change is not None:
            self.on_change(self, True)

    def advance(self) -> None:
        """One unit of the phase is done (counted up to its total: L-BFGS's line search may pass its plan)."""
        self.done = self.done + 1 if self.bar.total is None else min(self.done + 1, self.bar.total)
        _advance(self.bar)
        if self.on_change is not None:
            self.on_change(self, False)

    def within(self, prefix: str) -> EvalPhases:
        """The same bar, each phase's name after ``prefix`` (a client's evaluation among several)."""
        return EvalPhases(self.bar, self.title, self.on_change, self.prefix + prefix)

    def at(self) -> str:
        """``'linear probe 40/125 evaluations'``: the phase and how far it is."""
        total = self.bar.total
        return f"{self.name} {self.done}/{'?' if total is None else total} {self.bar.unit}"


class RoundBars:
    """Progress over rounds ``done`` .. ``total``, inside each over the work it trains (steps or
    clients), and over the evaluations' phases, each with the run's ETA.

    Args:
        done: rounds already completed (a resumed run starts there).
        total: R, the run's rounds.
        enabled: whether this process shows anything (rank 0).
        label_fraction: ``eval.label_fraction``, named next to the probe and kNN accuracies.
        eval_every: ``eval.every`` (the ETA's share of an evaluation per round).
        on_cpu: the run trains on a CPU (a long estimate is announced after the first steps).
        every: off a terminal, the longest silence (seconds) inside a round or an evaluation.
        resumed: the run goes on from a checkpoint (a line says from where).
        terminal: draw bars (None: when stdout and stderr are terminals); file: where (tqdm's
            default, stderr, when None).
    """

    def __init__(self, done: int, total: int, enabled: bool = True, label_fraction: float = 1.0,
                 eval_every: int = 1, on_cpu: bool = False, every: float = HEARTBEAT_SECONDS, resumed: bool = False,
                 terminal: bool | None = None, file: TextIO | None = None) -> None:
        self.total, self.enabled, self.label_fraction = total, enabled, label_fraction
        self.on_cpu, self.every, self.file = on_cpu, every, file
        self.bars = enabled and (interactive() if terminal is None else terminal)
        self.clock = RunClock(done, total, eval_every)
        self.bar = _bar("rounds", file, self.bars, total, leave=True, unit="rounds")
        self.bar.update(done)
        self.fresh, self.estimated = done == 0, False
        self.last_line = self.clock.now()
        self.round_, self.done = done, done
        self.ticks: ClientTicks | None = None
        if enabled and resumed:
            say(f"resumed from its checkpoint after round {done}/{total}" if done else
                f"resumed from its checkpoint in round 1/{total}")

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.done, self.total))

    def eta(self) -> str:
        left = self.clock.remaining()
        return "?" if left is None else duration(left)

    @contextmanager
    def round(self, round_: int) -> Iterator[ClientTicks]:
        """The (0-based) round's bar, as the ticks a finished client calls; the local loops' steps
        (``step_done``) count towards it meanwhile. An exception closes both bars, so a stopped
        run's last line is its message, not a progress bar."""
        self.round_ = round_
        bar = _bar(f"round {round_ + 1}", self.file, self.bars, unit="clients")
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

    def _changed(self, client: bool) -> None:
        """After a client (``client``) or a step: the bar's postfix, the long-run estimate, or a line off a terminal."""
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
        if self.bars:
            if client or clock.now() - self.last_line >= 0.5:
                self.last_line = clock.now()
                ticks.bar.set_postfix_str(f"{ticks.beside()}, run ETA {self.eta()}")
        elif clock.now() - self.last_line >= self.every:
            steps = f"{clock.steps_done}/{clock.steps}" if clock.steps else str(clock.steps_done)
            self._line(f"round {self.round_ + 1}/{self.total}: {clock.clients_done}/{clock.clients} clients and "
                       f"{steps} steps done; run ETA {self.eta()}")

    def _line(self, text: str) -> None:
        self.last_line = self.clock.now()
        say(text)

    def evaluate(self, what: str, evaluation: Callable[[EvalPhases], T]) -> T:
        """Run ``evaluation`` of ``what`` (``'the random-init model'``, ``'round 3'``), handing it the
        :class:`EvalPhases` its phases (features, linear probe, kNN, ...) report to; returns its result.
        Its time feeds the ETA. A bar over the running phase's work with the run's ETA on a terminal;
        off one, a line when it starts if it is the random-init model's (the run's first minutes), else
        after ``every`` seconds of silence."""
        bar = _bar(f"evaluating {what}", self.file, self.bars)
        started = self.clock.now()
        if self.enabled and not self.bars and what.startswith("the random-init"):
            self._line(f"evaluating {what} (features, linear probe, kNN) before round 1")

        def changed(phases: EvalPhases, new_phase: bool) -> None:
            if not self.enabled:
                return
            if self.bars:
                if new_phase or self.clock.now() - self.last_line >= 0.5:
                    self.last_line = self.clock.now()
                    bar.set_postfix_str(f"run ETA {self.eta()}")  # redrawn now: a phase takes seconds
            elif self.clock.now() - self.last_line >= self.every:
                self._line(f"evaluating {what}: {phases.at()}; run ETA {self.eta()}")

        try:
            return evaluation(EvalPhases(bar, f"evaluating {what}", changed))
        finally:
            bar.close()
            self.clock.eval_seconds = self.clock.now() - started

    def show(self, row: dict[str, Any], last_eval: dict[str, Any] | None) -> None:
        """A finished round's history ``row``: its loss and the latest evaluation's (``last_eval``) probe
        and the run's ETA on the bar, or one plain line with the metrics it measured and the run's ETA."""
        self.clock.end_round(row["seconds"])
        loss = row.get("train_loss")
        if self.bars:
            probe = (last_eval or {}).get(metric_names.PROBE)
            self.bar.update(1)
            self.bar.set_postfix_str(f"loss {'-' if loss is None else f'{loss:.3f}'}, probe "
                                     f"{'-' if probe is None else f'{probe:.3f}'}, run ETA {self.eta()}")
        elif self.enabled:
            measured = metrics_text(row, self.label_fraction)
            eta = f"; ETA {self.eta()}" if row["round"] < self.total else ""
            print(f"round {row['round']}/{self.total}: loss {'-' if loss is None else f'{loss:.4f}'}"
                  f"{', ' + measured if measured else ''}; {row['seconds']:.1f} s{eta}", flush=True)
            self.last_line = self.clock.now()

    def close(self) -> None:
        self.bar.close()
