"""The communication ledger: real bytes sent per client and round, by direction and dtype.

Directions: ``up`` and ``down`` (client <-> server each round), ``d2d`` (CF-CL's device-to-device
exchange) and ``new_test`` (LG-FedAvg's one-time upload of every client's local model for the
new test's ensemble, section 3.1 footnote), each its own ``bytes_*`` / ``params_*`` column.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path

import torch

from fedlight.atomic_files import atomic_write_bytes, disk_fix
from fedlight.errors import UserError

DIRECTIONS = ("up", "down", "d2d", "new_test")


def payload_bytes(payload: dict[str, torch.Tensor]) -> dict[str, int]:
    """Bytes of each dtype in ``payload`` (element count x element size)."""
    out: dict[str, int] = defaultdict(int)
    for t in payload.values():
        out[str(t.dtype).removeprefix("torch.")] += t.numel() * t.element_size()
    return dict(out)


@cache  # called for every ledger row when totals are summed
def element_size(dtype: str) -> int:
    """Bytes per element of a ledger dtype name such as ``float32``."""
    return torch.empty(0, dtype=getattr(torch, dtype)).element_size()


class CommLedger:
    """Rows of (round, client, direction, dtype, bytes)."""

    def __init__(self, rows: list[list] | None = None) -> None:
        self.rows: list[list] = [list(r) for r in rows or []]

    def record(self, round_: int, client: int, direction: str, payload: dict[str, torch.Tensor]) -> None:
        """Count ``payload`` as sent by/to ``client`` in ``round_`` (``direction`` in ``DIRECTIONS``)."""
        self.record_bytes(round_, client, direction, payload_bytes(payload))

    def record_bytes(self, round_: int, client: int, direction: str, sent: dict[str, int]) -> None:
        """Count ``sent`` (bytes by ledger dtype: a compressed upload's values, scales and packed ``uint8``
        codes, signs and indices) as sent by/to ``client`` in ``round_``."""
        assert direction in DIRECTIONS, direction
        for dtype, n in sorted(sent.items()):
            self.rows.append([round_, client, direction, dtype, n])

    def totals(self, round_: int | None = None, rows: list[list] | None = None) -> dict[str, int]:
        """``bytes_<direction>`` for every direction (``bytes_up``, ..., ``bytes_new_test``) and the same
        as tensor elements (``params_*``; LG-FedAvg's "# params communicated" is ``params_up +
        params_down + params_new_test``) for one round, or the whole run if None; ``rows`` (e.g. the
        round's own) instead of the ledger's, so a round's totals need not rescan the whole run."""
        out = {f"{unit}_{d}": 0 for unit in ("bytes", "params") for d in DIRECTIONS}
        for r, _, d, dtype, n in self.rows if rows is None else rows:
            if round_ is None or r == round_:
                out[f"bytes_{d}"] += n
                out[f"params_{d}"] += n // element_size(dtype)
        return out

    @staticmethod
    def csv_lines(rows: list[list]) -> str:
        """CSV lines of ``rows`` (comm.csv, and faults.csv with its own header)."""
        return "".join(",".join(str(v) for v in row) + "\n" for row in rows)

    CSV_HEADER = "round,client,direction,dtype,bytes\n"


def rewrite_csv(path: Path, header: str, rows: list[list]) -> None:
    """``path`` (comm.csv, faults.csv) as a run's start finds it in its checkpoint: whole or not at all, so a
    kill here leaves the old file, which the next start rewrites."""
    atomic_write_bytes(path, (header + CommLedger.csv_lines(rows)).encode())


def append_csv(path: Path, rows: list[list]) -> None:
    """A round's ``rows`` at the end of ``path``; a failed write is one line (the round is still saved, and
    the next start rewrites the file from its checkpoint: ``rewrite_csv``)."""
    try:
        with open(path, "a") as f:
            f.write(CommLedger.csv_lines(rows))
    except OSError as exc:
        raise UserError(f"cannot append to '{path}' ({exc.strerror or exc}); the next start rewrites it from "
                        f"the round's checkpoint: {disk_fix(path, exc)}, then rerun with --resume") from None
