import numpy as np

from fedlight.data.streams import arrival_batches, correlated_order, segment

LABELS = np.repeat(np.arange(4), 25)  # 100 samples, 4 classes


def _runs(seq: np.ndarray) -> list[int]:
    lengths, current = [], 1
    for a, b in zip(seq[:-1], seq[1:]):
        if LABELS[a] == LABELS[b]:
            current += 1
        else:
            lengths.append(current)
            current = 1
    return lengths + [current]


def test_stream_is_made_of_same_class_runs_of_stc() -> None:
    order = correlated_order(LABELS, np.arange(100), stc=10, rng=np.random.default_rng(0))
    assert sorted(order.tolist()) == list(range(100))
    # runs of 10, 10, 5 per class; adjacent runs of one class may merge, so runs are multiples
    assert all(length % 5 == 0 for length in _runs(order)) and max(_runs(order)) >= 10


def test_every_sample_once_per_pass_and_velocity() -> None:
    idx = np.arange(0, 100, 2)  # a client's 50 samples
    rng = lambda p: np.random.default_rng(1000 + p)  # noqa: E731
    rounds = [segment(LABELS, idx, 5, rng, r, velocity=20) for r in range(5)]
    assert all(len(s) == 20 for s in rounds)
    first_pass = np.concatenate(rounds)[:50]
    second_pass = np.concatenate(rounds)[50:100]
    assert sorted(first_pass.tolist()) == idx.tolist() == sorted(second_pass.tolist())
    assert not np.array_equal(first_pass, second_pass)  # each pass is freshly ordered
    assert np.array_equal(segment(LABELS, idx, 5, rng, 3, 20), rounds[3])  # deterministic


def test_arrival_batches() -> None:
    assert [len(b) for b in arrival_batches(np.arange(10), 4)] == [4, 4, 2]
