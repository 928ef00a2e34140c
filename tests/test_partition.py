import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlight.data.partition import class_counts, partition
from fedlight.errors import UserError

LABELS = np.repeat(np.arange(10), 100)  # 1000 samples, 10 balanced classes
KINDS = {"iid": {}, "dirichlet": {"alpha": 0.5}, "shards": {}, "classes": {"classes_per_client": 2},
         "class_ring": {"classes_per_client": 2}}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_index_exactly_once(kind: str, seed: int) -> None:
    parts = partition(kind, LABELS, 10, np.random.default_rng(seed), **KINDS[kind])
    everything = np.concatenate(parts)
    assert len(parts) == 10
    assert np.array_equal(np.sort(everything), np.arange(len(LABELS)))


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_partition(kind: str) -> None:
    a = partition(kind, LABELS, 10, np.random.default_rng(5), **KINDS[kind])
    b = partition(kind, LABELS, 10, np.random.default_rng(5), **KINDS[kind])
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_dirichlet_concentration_controls_skew() -> None:
    def mean_classes_held(alpha: float) -> float:
        parts = partition("dirichlet", LABELS, 10, np.random.default_rng(0), alpha=alpha, min_size=10)
        counts = class_counts(LABELS, parts, 10)
        return float((counts / counts.sum(1, keepdims=True) > 0.05).sum(1).mean())

    assert mean_classes_held(100.0) > 9.5      # near uniform
    assert mean_classes_held(0.1) < 4          # a few classes per client


def test_dirichlet_respects_min_size_and_fails_clearly() -> None:
    parts = partition("dirichlet", LABELS, 20, np.random.default_rng(0), alpha=0.1, min_size=10)
    assert min(map(len, parts)) >= 10
    with pytest.raises(UserError, match="partition.min_size"):
        partition("dirichlet", LABELS, 200, np.random.default_rng(0), alpha=0.5, min_size=10)


def test_shards_give_two_classes_per_client() -> None:
    parts = partition("shards", LABELS, 10, np.random.default_rng(0), shards_per_client=2)
    counts = class_counts(LABELS, parts, 10)
    assert ((counts > 0).sum(1) <= 2).all()
    assert (counts.sum(1) == 100).all()


def test_classes_kind_holds_k_classes_and_covers_all() -> None:
    parts = partition("classes", LABELS, 7, np.random.default_rng(0), classes_per_client=3)
    counts = class_counts(LABELS, parts, 10)
    assert ((counts > 0).sum(1) == 3).all()
    assert (counts.sum(0) == 100).all()
    with pytest.raises(UserError, match="classes_per_client"):
        partition("classes", LABELS, 3, np.random.default_rng(0), classes_per_client=2)


def _held(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> list[frozenset[int]]:
    return [frozenset(np.flatnonzero(row).tolist()) for row in class_counts(labels, parts, num_classes)]


def test_class_ring_cfcl_setting_by_hand() -> None:
    """CF-CL sec. IV: 10 devices, each 6K points of two of 10 classes; the ring makes the pairs overlap."""
    labels = np.repeat(np.arange(10), 6000)
    parts = partition("class_ring", labels, 10, np.random.default_rng(0), classes_per_client=2)
    held = _held(labels, parts, 10)
    assert all(len(p) == 6000 for p in parts) and all(len(h) == 2 for h in held)
    assert len(set(held)) == 10                                       # 10 distinct pairs
    assert (class_counts(labels, parts, 10) == 3000)[class_counts(labels, parts, 10) > 0].all()  # halves
    shared = {(i, j): len(held[i] & held[j]) for i in range(10) for j in range(i + 1, 10)}
    assert sorted(shared.values()).count(1) == 10 and sorted(shared.values()).count(2) == 0
    assert all(n == ((j - i) in (1, 9)) for (i, j), n in shared.items())  # exactly one with i-1 and i+1


def test_classes_kind_repeats_pairs_where_class_ring_overlaps_them() -> None:
    """Why CF-CL moved off ``classes``: 10 x 2 of 10 classes gives 5 pairs held twice, no partial overlap."""
    parts = partition("classes", LABELS, 10, np.random.default_rng(0), classes_per_client=2)
    held = _held(LABELS, parts, 10)
    assert len(set(held)) == 5
    assert all(len(a & b) != 1 for a in held for b in held)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(num_classes=st.integers(2, 12), extra_clients=st.integers(0, 14), per_client=st.integers(1, 12),
       seed=st.integers(0, 5))
def test_class_ring_properties(num_classes: int, extra_clients: int, per_client: int, seed: int) -> None:
    per_client = min(per_client, num_classes)
    clients = num_classes - per_client + 1 + extra_clients  # the fewest clients that cover the ring, and more
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), 3 * clients))
    parts = partition("class_ring", labels, clients, np.random.default_rng(seed), classes_per_client=per_client)
    again = partition("class_ring", labels, clients, np.random.default_rng(seed), classes_per_client=per_client)
    assert all(np.array_equal(x, y) for x, y in zip(parts, again))                    # deterministic per seed
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))    # every index exactly once
    held = _held(labels, parts, num_classes)
    ring = np.random.default_rng(seed).permutation(num_classes)                       # the generator's first draw
    assert held == [frozenset(ring[(i + j) % num_classes] for j in range(per_client)) for i in range(clients)]
    if per_client < num_classes:                                                      # ring neighbours overlap
        assert all(len(held[i] & held[i + 1]) == per_client - 1 for i in range(clients - 1))
    for c in range(num_classes):                                                      # a class split evenly
        sizes = [int(np.isin(np.flatnonzero(labels == c), p).sum()) for p, h in zip(parts, held) if c in h]
        assert max(sizes) - min(sizes) <= 1


def test_class_ring_needs_enough_clients_to_cover_the_ring() -> None:
    with pytest.raises(UserError, match="clients.num"):
        partition("class_ring", LABELS, 8, np.random.default_rng(0), classes_per_client=2)  # 8 + 1 < 10
    with pytest.raises(UserError, match="classes_per_client"):
        partition("class_ring", LABELS, 10, np.random.default_rng(0), classes_per_client=11)


def test_more_clients_than_samples() -> None:
    with pytest.raises(UserError, match="clients.num"):
        partition("iid", LABELS[:5], 10, np.random.default_rng(0))
