"""Feature shift, quantity skew and natural partitions: their properties, and the shipped kinds unchanged."""

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.config.loader import load_recipe
from fedlight.data.domain_names import DOMAIN_NAMES
from fedlight.data.domains import TRANSFORMS, domain_transforms, shift_features
from fedlight.data.partition import natural, partition, quantity_sizes
from fedlight.data.sources import synthetic
from fedlight.engine.run.fit import prepare_data
from fedlight.errors import UserError
from fedlight.seeding import numpy_rng

LABELS = np.random.default_rng(7).integers(0, 10, 3000)


def digest(parts: list[np.ndarray], *tensors: torch.Tensor) -> str:
    blob = b"".join(t.numpy().tobytes() for t in tensors)
    blob += b"".join(np.int64(len(p)).tobytes() + np.asarray(p, np.int64).tobytes() for p in parts)
    return hashlib.sha256(blob).hexdigest()[:16]


# recorded with the code before feature shift, quantity skew and natural partitions were added
SHIPPED = [("iid", {}, "f54e5e8d7e6a92d0"), ("dirichlet", {"alpha": 0.5}, "9989196ad8e5d784"),
           ("dirichlet", {"alpha": 0.1, "min_size": 5}, "19f7a526759e62ab"),
           ("shards", {"shards_per_client": 2}, "ab5ac3dab8294c93"),
           ("classes", {"classes_per_client": 3}, "88ba9adeea3ba990"),
           ("class_ring", {"classes_per_client": 2}, "73afc7bcd2ebb73b")]


@pytest.mark.parametrize("kind, options, expected", SHIPPED)
def test_shipped_partitions_unchanged_bit_for_bit(kind: str, options: dict, expected: str) -> None:
    assert digest(partition(kind, LABELS, 10, numpy_rng(0, "partition"), **options)) == expected


# prepare_data's images and partition on the tiny synthetic recipe, recorded before the change
PREPARED = [([], "0aeafbf4899ccd03"), (["partition.kind=shards", "clients.num=5"], "e75faacd150a3ac5"),
            (["partition.kind=iid", "clients.num=4", "data.subset=600"], "67690209c4c40f30")]


@pytest.mark.parametrize("overrides, expected", PREPARED)
def test_prepared_data_unchanged_bit_for_bit(tiny_recipe: Path, overrides: list[str], expected: str) -> None:
    data, parts = prepare_data(load_recipe(tiny_recipe, overrides))
    assert data.train_domain is None and data.test_domain is None
    assert digest(parts, data.train_x, data.test_x) == expected


def covers_once(parts: list[np.ndarray], n: int) -> bool:
    return np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))


@pytest.mark.parametrize("law", ["lognormal", "power_law"])
@pytest.mark.parametrize("seed", [0, 1])
def test_quantity_skew_properties(law: str, seed: int) -> None:
    run = lambda: partition("quantity", LABELS, 20, np.random.default_rng(seed), law=law, sigma=1.5,  # noqa: E731
                            exponent=1.2, min_size=25)
    parts = run()
    sizes = np.array([len(p) for p in parts])
    assert covers_once(parts, len(LABELS)) and sizes.min() >= 25
    assert all(np.array_equal(a, b) for a, b in zip(parts, run()))
    assert sizes.max() > 3 * sizes.min()  # skewed, not equal sizes


def test_quantity_sizes_by_hand() -> None:
    # weights drawn, then 100 - 4 x 10 = 60 shared in proportion: the sizes add up and keep the minimum
    sizes = quantity_sizes(100, 4, np.random.default_rng(0), "lognormal", 1.0, 1.5, 10)
    weights = np.random.default_rng(0).lognormal(0.0, 1.0, 4)
    assert sizes.sum() == 100 and sizes.min() >= 10
    assert np.all(np.abs(sizes - 10 - 60 * weights / weights.sum()) < 1)
    assert list(np.argsort(sizes)) == list(np.argsort(weights))


def test_quantity_skew_ignores_labels() -> None:
    """Sizes and members depend on the sample count and the seed alone: other labels, same partition."""
    a = partition("quantity", LABELS, 8, np.random.default_rng(3))
    b = partition("quantity", np.zeros_like(LABELS), 8, np.random.default_rng(3))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_quantity_skew_min_size_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="partition.min_size=100"):
        partition("quantity", LABELS, 40, np.random.default_rng(0), min_size=100)


def test_natural_partition_properties() -> None:
    groups = np.random.default_rng(1).integers(0, 30, 3000)
    merged = natural(groups, 7, np.random.default_rng(0), "merge")
    assert covers_once(merged, len(groups))
    assert all(len(set(groups[p])) in (4, 5) for p in merged)  # 30 writers dealt over 7 clients
    assert len(set().union(*(set(groups[p]) for p in merged))) == 30
    sampled = natural(groups, 7, np.random.default_rng(0), "sample")
    assert all(len(set(groups[p])) == 1 for p in sampled)  # one writer a client, all its samples
    assert all(len(p) == (groups == groups[p[0]]).sum() for p in sampled)
    assert len({int(groups[p[0]]) for p in sampled}) == 7
    again = natural(groups, 7, np.random.default_rng(0), "sample")
    assert all(np.array_equal(a, b) for a, b in zip(sampled, again))


def test_natural_partition_refuses_more_clients_than_writers() -> None:
    with pytest.raises(UserError, match="clients.num=31 exceeds the 30 writers"):
        natural(np.arange(3000) % 30, 31, np.random.default_rng(0))
    with pytest.raises(UserError, match="needs a per-sample group id"):
        partition("natural", LABELS, 3, np.random.default_rng(0))


@pytest.mark.parametrize("name", DOMAIN_NAMES)
def test_each_domain_transform_is_fixed_and_keeps_shape(name: str) -> None:
    images = synthetic(0, train=20, test=4).train_x
    first, second = (domain_transforms([name], np.random.default_rng(5))[0] for _ in range(2))
    out = first(images)
    assert out.dtype == torch.uint8 and out.shape == images.shape
    assert torch.equal(out, second(images))  # the same seed draws the same transform
    assert torch.equal(out, images) == (name == "identity")


def test_transforms_by_hand() -> None:
    images = torch.arange(16, dtype=torch.uint8).reshape(1, 1, 4, 4) * 10
    assert torch.equal(TRANSFORMS["invert"](np.random.default_rng(0))(images), 255 - images)
    turned = TRANSFORMS["rotate"](np.random.default_rng(0))(images)
    assert any(torch.equal(turned, torch.rot90(images, k, dims=(2, 3))) for k in (1, 2, 3))
    with pytest.raises(UserError, match="colour shifts the hue of RGB images"):
        TRANSFORMS["colour"](np.random.default_rng(0))(images)


def test_noise_draws_a_field_of_its_own_for_every_image_it_sees() -> None:
    """The training split and the test split go through the transform one after the other: test image 0
    must not carry training image 0's noise (as it did with a generator reseeded at every call)."""
    grey = torch.full((3, 1, 8, 8), 128, dtype=torch.uint8)
    noise = TRANSFORMS["noise"](np.random.default_rng(0))
    train, test = noise(grey).int() - 128, noise(grey).int() - 128
    assert not torch.equal(train, test) and train.abs().sum() > 0 and test.abs().sum() > 0
    assert not any(torch.equal(train[i], test[j]) for i in range(3) for j in range(3))


def test_feature_shift_partitions_within_each_domain() -> None:
    data = synthetic(0, train=600, test=150)
    split_rng = np.random.default_rng(0)
    labels = data.train_y.numpy()
    split = lambda idx, k: partition("dirichlet", labels[idx], k, split_rng, alpha=0.5, min_size=5)  # noqa: E731
    shifted = shift_features(data, ["identity", "invert", "blur"], 7, np.random.default_rng(1), split)
    assert covers_once(shifted.parts, 600)
    assert list(shifted.client_domain) == [0, 0, 0, 1, 1, 2, 2]
    domain = shifted.data.train_domain.numpy()
    assert all(len(set(domain[p])) == 1 and domain[p[0]] == d for p, d in zip(shifted.parts, shifted.client_domain))
    assert np.bincount(domain).tolist() == [257, 172, 171]  # in proportion to the clients of each domain
    test_domain = shifted.data.test_domain.numpy()
    assert np.bincount(test_domain).tolist() == [50, 50, 50]
    inverted = shifted.data.test_domain == 1
    assert torch.equal(shifted.data.test_x[inverted], 255 - data.test_x[inverted])
    untouched = shifted.data.train_domain == 0
    assert torch.equal(shifted.data.train_x[untouched], data.train_x[untouched])
    assert torch.equal(shifted.data.train_y, data.train_y)


def test_feature_shift_needs_a_client_per_domain() -> None:
    data = synthetic(0, train=60, test=20)
    with pytest.raises(UserError, match="lists 3 domains but clients.num=2"):
        shift_features(data, ["identity", "rotate", "blur"], 2, np.random.default_rng(0), lambda i, k: [i])


def test_feature_shift_through_the_recipe_is_seeded(tiny_recipe: Path) -> None:
    overrides = ["partition.domains=[identity,rotate,style]", "clients.num=6"]
    (a, parts_a), (b, parts_b) = (prepare_data(load_recipe(tiny_recipe, overrides)) for _ in range(2))
    assert digest(parts_a, a.train_x, a.test_x, a.train_domain) == digest(parts_b, b.train_x, b.test_x, b.train_domain)
    assert covers_once(parts_a, len(a.train_y))
    assert a.domain_names == ("identity", "rotate", "style")


@pytest.mark.parametrize("override, named", [
    ("partition.domains=[identity,sepia]", "unknown domain transform 'sepia'"),
    ("partition.quantity_sigma=0", "partition.quantity_sigma' must be in (0, 5]"),
    ("partition.quantity_exponent=11", "partition.quantity_exponent' must be in (0, 10]"),
    ("partition.kind=natural", "needs a per-sample group id"),
])
def test_bad_heterogeneity_settings_end_in_one_line(tiny_recipe: Path, override: str, named: str, capsys) -> None:
    from fedlight.cli import main

    code = main(["fit", "--recipe", str(tiny_recipe), override])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tiny_recipe.parent / "run").exists()


FLESD_SERVER = "server={name: flesd, epochs: 2, queue_size: 64, batch_size: 32}"


@pytest.mark.parametrize("overrides, named", [
    (["clients.num=2", "partition.domains=[identity,rotate,blur]"], "lists 3 domains but clients.num=2"),
    (["clients.num=3", "partition.public_client=0", FLESD_SERVER, "partition.domains=[identity,rotate,blur]"],
     "domain 'identity' holds only the public client"),
    (["partition.kind=natural", "partition.domains=[identity,invert]"], "the writers are the feature shift"),
    (["new_device.rotation=90", "partition.domains=[identity,invert]"], "new_device.rotation draws"),
    (["server={name: centralized}", "eval.local_test=true", "partition.domains=[identity,invert]"],
     "set eval.local_test=false"),
    (["data.test_subset=10", "partition.domains=[identity,invert]"], "a domain 5 test images, fewer than the 10"),
])
def test_feature_shift_that_cannot_go_with_the_recipe_ends_in_one_line(tiny_recipe: Path, overrides: list[str],
                                                                       named: str, capsys) -> None:
    from fedlight.cli import main

    code = main(["fit", "--recipe", str(tiny_recipe), *overrides])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tiny_recipe.parent / "run").exists()


@pytest.mark.parametrize("names, shape, named", [
    (["identity", "contrast"], (10, 1), "samples are 10 x 1 x 1"),
    (["identity", "colour"], (1, 28), "colour shifts the hue of RGB images"),
])
def test_transforms_refuse_samples_they_cannot_take_before_any_data(names: list[str], shape: tuple[int, int],
                                                                    named: str) -> None:
    from fedlight.data.domains import check_domain_images

    with pytest.raises(UserError, match=named):
        check_domain_images(names, *shape)
    check_domain_images(names[:1] + ["invert"], 3, 16)


def test_a_sweep_refuses_a_shift_the_data_cannot_take_where_the_data_is_elsewhere(tiny_recipe: Path,
                                                                                   tmp_path: Path) -> None:
    from fedlight.engine.run.fit import check_elsewhere

    elsewhere = f"data={{name: fashion_mnist, root: {tmp_path / 'none'}, download: false}}"
    with pytest.raises(UserError, match="colour shifts the hue"):
        check_elsewhere(load_recipe(tiny_recipe, [elsewhere, "partition.domains=[identity,colour]"]))
    with pytest.raises(UserError, match="lists 3 domains"):
        check_elsewhere(load_recipe(tiny_recipe, [elsewhere, "partition.domains=[identity,rotate,blur]"]))


def test_domain_test_split_keeps_each_client_in_its_domain() -> None:
    from fedlight.data.partition import domain_test_split

    train_labels, test_labels = LABELS[:2000], LABELS[2000:]
    train_domain, test_domain = np.repeat([0, 1], 1000), np.tile([0, 1], 500)
    rng = np.random.default_rng(0)
    parts = [*partition("dirichlet", train_labels[:1000], 3, rng), *(p + 1000 for p in partition(
        "iid", train_labels[1000:], 2, rng))]
    split = domain_test_split(train_labels, parts, test_labels, np.random.default_rng(1), train_domain, test_domain)
    assert [set(test_domain[s]) for s in split] == [{0}, {0}, {0}, {1}, {1}]
    assert len(np.concatenate(split)) == len(np.unique(np.concatenate(split)))  # no test image twice
    assert sum(map(len, split[:3])) >= 495 and sum(map(len, split[3:])) >= 495  # (up to classes nobody holds)


def test_client_knn_shares_stay_in_each_clients_domain(tiny_recipe: Path) -> None:
    from fedlight.engine.run.assemble import client_test_shares

    recipe = load_recipe(tiny_recipe, ["partition.domains=[identity,invert]", "clients.num=4",
                                       "eval.readings=[client_knn]"])
    data, parts = prepare_data(recipe)
    shares = client_test_shares(recipe, data, parts)
    train_domain, test_domain = data.train_domain.numpy(), data.test_domain.numpy()
    assert [set(test_domain[s]) for s in shares] == [set(train_domain[p]) for p in parts] == [{0}, {0}, {1}, {1}]


def test_fedbn_scores_each_client_on_its_own_domain(tiny_recipe: Path) -> None:
    from fedlight.engine.run.fit import fit

    res = fit(load_recipe(tiny_recipe, ["method={name: fedbn, objective: supervised}", "eval.local_test=true",
                                        "partition.domains=[identity,invert]", "clients.num=4", "rounds=1",
                                        "model.backbone=tiny_cnn", "data.subset=400", "eval.probe_epochs=1",
                                        "eval.knn_k=5", "eval.projector_samples=0"]))
    final = res["final"]
    assert 0 <= final["local_test_acc"] <= 1 and 0 <= final["test_acc_domain1"] <= 1
