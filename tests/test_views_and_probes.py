import numpy as np
import pytest
import torch

from fedlight.data.views import ViewMaker, ViewParams
from fedlight.eval.probes import knn_accuracy, knn_predict, label_subset, linear_probe_accuracy


def _maker(c: int, **kw) -> ViewMaker:
    return ViewMaker(ViewParams(**kw), torch.zeros(c), torch.ones(c))


def test_views_are_seeded_and_distinct() -> None:
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    vm = _maker(3, blur_p=(1.0, 0.1), solarize_p=(0.0, 0.2))
    a = vm.views(x, 2, torch.Generator().manual_seed(0))
    b = vm.views(x, 2, torch.Generator().manual_seed(0))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], a[1])
    assert a[0].shape == x.shape and torch.isfinite(a[0]).all()
    assert a[0].min() >= 0 and a[0].max() <= 1  # mean 0 / std 1: values stay in [0, 1]


@pytest.mark.parametrize("on_device", [False, True])
def test_flip_mirrors_the_same_crop(on_device: bool) -> None:
    x = torch.randint(0, 256, (4, 1, 8, 8), dtype=torch.uint8)
    same = _maker(1, crop_min_scale=1.0, flip_p=0.0, jitter_p=0.0)
    flip = _maker(1, crop_min_scale=1.0, flip_p=1.0, jitter_p=0.0)
    same.on_device = flip.on_device = on_device
    flipped = flip.view(x, 0, torch.Generator().manual_seed(0))
    keep = same.view(x, 0, torch.Generator().manual_seed(0))
    assert torch.allclose(flipped, keep.flip(-1), atol=1e-5)


def test_grayscale_makes_channels_equal() -> None:
    x = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    v = _maker(3, grayscale_p=1.0, jitter_p=0.0).view(x, 0, torch.Generator().manual_seed(1))
    assert torch.allclose(v[:, 0], v[:, 1]) and torch.allclose(v[:, 1], v[:, 2])


def test_hue_rotation_by_zero_and_full_turn_is_identity() -> None:
    x = torch.rand(2, 3, 4, 4)
    for h in (0.0, 1.0):
        assert torch.allclose(ViewMaker._rotate_hue(x, torch.full((2,), h)), x, atol=1e-5)


def test_knn_and_probe_on_separable_features() -> None:
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(3, 8, generator=g) * 5
    y = torch.arange(90) % 3
    feats = centers[y] + 0.1 * torch.randn(90, 8, generator=g)
    assert knn_accuracy(feats[:60], y[:60], feats[60:], y[60:], 3, k=5) == 1.0
    assert linear_probe_accuracy(feats[:60], y[:60], feats[60:], y[60:], 3, steps=50) == 1.0


def test_non_finite_features_are_refused_not_scored_at_chance() -> None:
    # a DP model with a negative BatchNorm variance had NaN features: kNN voted class 0 (chance), L-BFGS
    # raised "value cannot be converted to type float without overflow"
    y = torch.arange(90) % 3
    feats = torch.nn.functional.one_hot(y, 8).float()
    feats[5, 0] = float("nan")
    with pytest.raises(ValueError, match="features are not finite"):
        knn_accuracy(feats[:60], y[:60], feats[60:], y[60:], 3, k=5)
    with pytest.raises(ValueError, match="features are not finite"):
        linear_probe_accuracy(feats[:60], y[:60], feats[60:], y[60:], 3, steps=50)


def test_knn_hand_computed_vote() -> None:
    bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    query = torch.tensor([[0.2, 1.0]])  # nearest is class 1, but k=3 lets class 0 outvote at high T
    assert knn_accuracy(bank, labels, query, torch.tensor([1]), 2, k=1) == 1.0
    assert knn_accuracy(bank, labels, query, torch.tensor([0]), 2, k=3, temperature=100.0) == 1.0


def test_knn_matches_lightly_knn_predict_where_no_class_ties() -> None:
    """The same weighted vote as lightly's ``knn_predict`` (why we keep ours: the exact-tie test below)."""
    from lightly.utils.benchmarking import knn_predict

    g = torch.Generator().manual_seed(0)
    centers = torch.randn(5, 16, generator=g)
    y_bank, y_test = torch.randint(0, 5, (300,), generator=g), torch.randint(0, 5, (200,), generator=g)
    bank = centers[y_bank] + 1.5 * torch.randn(300, 16, generator=g)
    test = centers[y_test] + 1.5 * torch.randn(200, 16, generator=g)
    theirs = knn_predict(torch.nn.functional.normalize(test, dim=1), torch.nn.functional.normalize(bank, dim=1).T,
                         y_bank, 5, knn_k=20, knn_t=0.1)[:, 0]
    expected = float((theirs == y_test).float().mean())
    assert 0.3 < expected < 1.0  # neither trivial nor hopeless: predictions differ between test points
    assert knn_accuracy(bank, y_bank, test, y_test, 5, k=20, temperature=0.1) == expected


@pytest.mark.parametrize("temperature", [0.1, 0.01, 0.005, 0.001])
def test_knn_votes_right_at_a_temperature_whose_weights_overflow_float32(temperature: float) -> None:
    """exp(0.999 / 0.005) is inf in float32: both neighbours' weights were inf and the tie went to class 0,
    though the class-1 point is the nearer one."""
    angle = torch.tensor([0.95, 0.999]).acos()
    bank = torch.stack([angle.cos(), angle.sin()], dim=1)  # cosines 0.95 (class 0) and 0.999 (class 1) to [1, 0]
    pred = knn_predict(bank, torch.tensor([0, 1]), torch.tensor([[1.0, 0.0]]), 2, k=2, temperature=temperature)
    assert pred.tolist() == [1]


def test_knn_breaks_an_exact_tie_towards_the_lowest_class() -> None:
    """4 identical bank points, two of class 98 and two of 99 (of 100): equal votes, class 98 wins."""
    bank, query = torch.ones(4, 2), torch.ones(1, 2)
    labels = torch.tensor([99, 98, 99, 98])
    assert knn_accuracy(bank, labels, query, torch.tensor([98]), 100, k=4) == 1.0


def test_label_subset_is_class_balanced() -> None:
    labels = np.repeat(np.arange(4), 50)
    idx = label_subset(labels, 0.1, np.random.default_rng(0))
    assert np.array_equal(np.bincount(labels[idx]), [5, 5, 5, 5])
    assert len(label_subset(labels, 1.0, np.random.default_rng(0))) == 200
