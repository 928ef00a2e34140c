import numpy as np
import pytest

from fedlight.data.partition import class_counts, partition
from fedlight.errors import UserError

LABELS = np.repeat(np.arange(10), 100)  # 1000 samples, 10 balanced classes
KINDS = {"iid": {}, "dirichlet": {"alpha": 0.5}, "shards": {}, "classes": {"classes_per_client": 2}}


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


def test_more_clients_than_samples() -> None:
    with pytest.raises(UserError, match="clients.num"):
        partition("iid", LABELS[:5], 10, np.random.default_rng(0))
