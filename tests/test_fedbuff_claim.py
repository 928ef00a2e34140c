"""benchmarks/fedbuff_claim.py: the FedBuff block's verdicts on hand-made seeds."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fedbuff_claim import Seed, pair, seeds_for_sign_test, verdicts  # noqa: E402


def seeds(buff: list[float], t_buff: list[float], sync: float = 58.0, floor: float = 47.0) -> list[Seed]:
    """Sync ends at ``sync`` points at 300 virtual seconds in every seed (its final + 0.1 k, k the seed)."""
    return [Seed(k, floor, sync + 0.1 * k, b + 0.1 * k, 300.0, t, 120.0) for k, (b, t) in enumerate(zip(buff, t_buff))]


def test_faster_and_equivalent() -> None:
    v = verdicts(seeds([57.5, 58.3, 57.9, 58.1, 57.8, 58.2, 58.0], [90.0] * 7), min_lift=3.7)
    assert v.trained and (v.sign.a_first, v.sign.b_first) == (7, 0)
    assert v.sign.p == 2 / 2**7
    assert v.adjusted == ("holds", "holds")  # p 0.016 < 0.025 at Holm's first rank; TOST p far below


def test_a_censored_seed_counts_as_sync_first() -> None:
    v = verdicts(seeds([58.0] * 6 + [50.0], [90.0] * 6 + [math.inf]), min_lift=3.7)
    assert (v.sign.a_first, v.sign.b_first) == (6, 1)
    assert v.adjusted[0] == "inconclusive"  # 6 of 7: p 0.125


def test_slower_and_below_the_margin() -> None:
    v = verdicts(seeds([53.0, 52.5, 53.2, 52.8, 53.1, 52.9, 53.0], [math.inf] * 7), min_lift=3.7)
    assert v.adjusted == ("does not hold", "does not hold")


def test_a_control_that_did_not_train_voids_both() -> None:
    v = verdicts(seeds([48.0] * 5, [90.0] * 5, sync=48.0), min_lift=3.7)
    assert not v.trained and all(a.startswith("void: control sync") for a in v.adjusted)


def test_time_to_reach_is_the_first_evaluation_at_or_above_sync_final() -> None:
    def run(knn: list[float | None], seconds: list[float], final: float) -> dict:
        return {"baseline": {"knn_acc": 0.47}, "final": {"knn_acc": final},
                "history": [{"virtual_seconds": t, "knn_acc": k} for k, t in zip(knn, seconds)]}
    sync = run([None, 0.55, None, 0.58], [10.0, 20.0, 30.0, 40.0], 0.58)
    s = pair(1, sync, run([0.57, 0.58, 0.59, 0.57], [3.0, 6.0, 9.0, 12.0], 0.57))
    assert (s.t_sync, s.t_buff, s.t_buff_end) == (40.0, 6.0, 12.0)
    assert pair(1, sync, run([0.57, 0.579], [3.0, 6.0], 0.579)).t_buff == math.inf


def test_sign_test_seeds() -> None:
    assert seeds_for_sign_test(1.0) == 7  # 2 / 2**7 = 0.016 < 0.025; 2 / 2**6 = 0.031 is not
