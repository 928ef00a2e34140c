"""CF-CL's delay model (Sec. IV): transmission time over 1 Mbit/s links, from the bytes sent.

Model parameters go up at 32 bits each (45,433 parameters: ~1.45 s per upload in the paper)
and a 28 x 28 image crosses a D2D link at 8 bits per pixel (~6.2 ms). Devices transmit in
parallel, so an aggregation period costs the slowest device's upload plus the slowest
device's D2D reception, plus the slowest device's exchange computation (K-means and
importance scores), which the paper also counts.
"""

from __future__ import annotations

from collections import defaultdict

RATE_BITS_PER_SECOND = 1e6


def period_delay(rows: list[list], compute_seconds: dict[int, float] | None = None,
                 rate: float = RATE_BITS_PER_SECOND) -> float:
    """Seconds one aggregation period takes under the delay model.

    Args:
        rows: the period's ledger rows [round, client, direction, dtype, bytes].
        compute_seconds: each device's exchange computation time in the period.
        rate: link rate in bits per second (uplink and D2D alike).
    """
    bits: dict[str, dict[int, int]] = {"up": defaultdict(int), "d2d": defaultdict(int)}
    for _, client, direction, _, n in rows:
        if direction in bits:
            bits[direction][client] += 8 * n
    comm = sum(max(per.values(), default=0) / rate for per in bits.values())
    return comm + max((compute_seconds or {}).values(), default=0.0)
