"""The collapse alarm: a run whose encoder keeps reading as collapsed says so, once.

An evaluation reads as collapsed when its RankMe (``fedlight.eval.diagnostics.rankme``) is below
``rankme`` (default 2: the test embeddings span about two directions or fewer), or when its embedding std
(SimSiam's per-dimension std of the unit-length embeddings, ``embedding_std_mean``) times sqrt(D) is below
``std`` (default 0.05: a twentieth of an isotropic embedding's 1, Chen and He 2021, section 4.1). When
``patience`` evaluations in a row (default 2) read so, the alarm fires: its record goes in that round's
history row (key ``collapse``) and in results.json; the run prints one line, and with ``stop`` it ends
there, checkpointed, so ``--resume`` goes on from it. It fires once per run: a resumed run whose history
holds the record never fires again. The random-init model (results.json's ``baseline``) is not watched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

RANKME, STD = "rankme", "embedding_std_mean"


@dataclass(frozen=True)
class CollapseAlarm:
    """Thresholds and patience of the alarm (recipe keys ``eval.collapse_*``).

    Attributes:
        rankme: an evaluation whose RankMe is below it reads as collapsed.
        std: one whose embedding std times sqrt(D) is below it reads as collapsed.
        patience: evaluations in a row that must read as collapsed.
        stop: end the run (checkpointed, resumable) when the alarm fires.
    """

    rankme: float = 2.0
    std: float = 0.05
    patience: int = 2
    stop: bool = False

    def low_reading(self, row: dict[str, Any], dim: int | None) -> tuple[str, float, float] | None:
        """(reading, value, threshold) of the first reading of history ``row`` below its threshold, else None;
        ``dim``: the embedding's D (None: the std is not watched)."""
        if row.get(RANKME) is not None and row[RANKME] < self.rankme:
            return RANKME, row[RANKME], self.rankme
        if row.get(STD) is not None and dim and row[STD] * math.sqrt(dim) < self.std:
            return f"{STD} x sqrt(D)", row[STD] * math.sqrt(dim), self.std
        return None

    def fires(self, history: list[dict[str, Any]], dim: int | None) -> dict[str, Any] | None:
        """The alarm's record when the last row of ``history`` is an evaluation that completes ``patience``
        collapsed evaluations in a row and no row has fired before; else None."""
        if not history or any("collapse" in row for row in history):
            return None
        evaluated = [row for row in history if row.get(RANKME) is not None or row.get(STD) is not None]
        if not evaluated or evaluated[-1] is not history[-1] or len(evaluated) < self.patience:
            return None
        lows = [self.low_reading(row, dim) for row in evaluated[-self.patience:]]
        if not all(lows):
            return None
        reading, value, threshold = lows[-1]
        return {"round": history[-1]["round"], "reading": reading, "value": value, "threshold": threshold,
                "evaluations": self.patience}


def alarm_line(record: dict[str, Any], stop: bool) -> str:
    """The one line the run prints when the alarm fires."""
    then = ("the run stops here, checkpointed: --resume goes on" if stop
            else "set eval.collapse_stop=true to stop such a run")
    return (f"round {record['round']}: the encoder reads as collapsed: {record['reading']} {record['value']:.4g} below "
            f"{record['threshold']:g} at {record['evaluations']} evaluations in a row; {then}")


def first_record(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """results.json's ``collapse``: the record of the alarm in ``history``, or None if it never fired."""
    return next((row["collapse"] for row in history if "collapse" in row), None)
