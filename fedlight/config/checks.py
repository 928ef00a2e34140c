"""Constraints on recipe values: small functions that return what is wrong, or None.

The recipe schema attaches them to its fields (``schema.check``); a method's or aggregator's
constructor attaches them to its parameters as ``typing.Annotated`` metadata
(``temperature: Annotated[float, positive] = 0.5``), which ``fedlight.registry`` reads. Either
way ``coerce`` applies them after the type check, so a value is refused, in one line naming
its key, before any of it reaches torch or lightly.
"""

from __future__ import annotations

from typing import Any, Callable

Check = Callable[[Any], "str | None"]
"""A range an option declares (``Annotated[float, positive]``): value -> None where it is in range, else
what it must be (``'must be > 0'``), said in one line naming the option's key."""


def positive(v: Any) -> str | None:
    """Sizes, counts, temperatures, learning rates: > 0."""
    return None if v > 0 else "must be > 0"


def non_negative(v: Any) -> str | None:
    """Weights of a loss term, penalties, thresholds: >= 0."""
    return None if v >= 0 else "must be >= 0"


def fraction(v: Any) -> str | None:
    """A share of something that must not be empty: (0, 1]."""
    return None if 0 < v <= 1 else "must be in (0, 1]"


def probability(v: Any) -> str | None:
    """Probabilities, momentum / EMA factors, accuracies: [0, 1]."""
    return None if 0 <= v <= 1 else "must be in [0, 1]"


def decay(v: Any) -> str | None:
    """A moment's decay factor that must forget (an adaptive server optimizer's betas): [0, 1)."""
    return None if 0 <= v < 1 else "must be in [0, 1)"


def open_unit(v: Any) -> str | None:
    """A probability that must be neither 0 nor 1 (DP's delta: 0 promises nothing finite, 1 nothing at all): (0, 1)."""
    return None if 0 < v < 1 else "must be in (0, 1)"


def below_half(v: Any) -> str | None:
    """A share trimmed from each side of a sorted list, leaving its middle: [0, 0.5)."""
    return None if 0 <= v < 0.5 else "must be in [0, 0.5)"


def percent(v: Any) -> str | None:
    """A share in percent that must not be empty: (0, 100]."""
    return None if 0 < v <= 100 else "must be in (0, 100]"


def at_least(low: int) -> Check:
    """``>= low`` (e.g. a batch of at least two samples)."""
    def check(v: Any) -> str | None:
        return None if v >= low else f"must be >= {low}"
    return check


def probabilities(v: Any) -> str | None:
    """A non-empty list of probabilities (one per view, cycled)."""
    if not v:
        return "must list at least one probability (one per view)"
    return None if all(0 <= p <= 1 for p in v) else "every entry must be in [0, 1]"


def non_empty(v: Any) -> str | None:
    """A list that an empty one would make meaningless (e.g. layers to average)."""
    return None if len(v) else "must not be empty"


def folder_name(v: Any) -> str | None:
    """A run's name, ``runs/<name>``: one folder or a path of them (``exp1/seed0``), each part a folder's
    name. An empty part, '.' or '..' would make it ``runs/`` itself or a folder above it, whose other runs a
    replacement would take with it."""
    if any(part in ("", ".", "..") for part in str(v).replace("\\", "/").split("/")):
        return "must name a folder under runs/ (no empty part, '.' or '..')"
    return None


def distinct(v: Any) -> str | None:
    """A list that names each entry at most once (e.g. the run's loggers)."""
    twice = sorted({x for x in v if v.count(x) > 1})
    return f"names {', '.join(twice)} more than once" if twice else None


SEED_MAX = 2**63 - 1  # the largest seed an int64 holds: the columns (TensorBoard's hparams, CSV readers) that record it
DIRICHLET_MIN = 1e-3  # below it numpy's Dirichlet draws underflow to one client per class (float64)


def seed_value(v: Any) -> str | None:
    """A run seed: numpy's ``SeedSequence`` takes any size, but the records of a run keep it as an int64."""
    return None if 0 <= v <= SEED_MAX else f"must be in [0, 2**63 - 1 = {SEED_MAX}]"


def concentration(v: Any) -> str | None:
    """A Dirichlet concentration ``alpha`` numpy can draw from: below ``DIRICHLET_MIN`` (10 clients) more
    than 99.9% of its draws are exact one-hots, so every smaller alpha makes the same partitions."""
    return None if v >= DIRICHLET_MIN else (
        f"must be >= {DIRICHLET_MIN:g} (below it a Dirichlet draw underflows to one client per class: "
        "use partition.kind=classes with partition.classes_per_client=1 for that)")
