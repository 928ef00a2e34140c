"""Dataset sources: every dataset becomes uint8 image tensors (N, C, H, W) plus int64 labels.

Images stay uint8 (4x smaller than float) so whole datasets fit on the training device;
views are made from them in batches (``fedlight.data.views``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedlight.data.idx import read_idx
from fedlight.data.image_data import ImageData
from fedlight.data.locate import (IDX_FILES, check_root_length, download_failed, expected_layout, find_idx,
                                  missing_idx, not_found)
from fedlight.data.natural_sources import femnist, hf_disk
from fedlight.data.tabular import diabetes
from fedlight.errors import UserError, warnings_if_it_works
from fedlight.seeding import torch_generator


# the first training labels of the official files: MNIST and Fashion-MNIST share the IDX files' names, so these
# tell a data.root holding the other one's files (10 labels: a chance match is 1e-10)
FIRST_LABELS = {"mnist": (5, 0, 4, 1, 9, 2, 1, 3, 1, 4), "fashion_mnist": (9, 0, 0, 3, 0, 2, 7, 2, 5, 5)}


def _fashion_mnist(root: Path, download: bool, mnist: bool = False) -> ImageData:
    """Fashion-MNIST, or MNIST (same IDX file names) when ``mnist``."""
    label = "MNIST" if mnist else "Fashion-MNIST"
    if find_idx(root, IDX_FILES["train_x"], mnist) is None and download:
        import torchvision.datasets as tvd

        try:
            for train in (True, False):
                (tvd.MNIST if mnist else tvd.FashionMNIST)(str(root), train=train, download=True)
        except (OSError, RuntimeError) as exc:  # torchvision: "Error downloading ..." once every mirror failed
            raise download_failed("mnist" if mnist else "fashion_mnist", root, exc) from None
    arrays = {}
    for key, stem in IDX_FILES.items():
        path = find_idx(root, stem, mnist)
        if path is None:
            raise missing_idx(root, stem, mnist)
        arrays[key] = read_idx(path)
    for split in ("train", "test"):
        x, y = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise UserError(f"{label} files in data.root '{root}' have mismatched shapes {tuple(x.shape)} "
                            f"and {tuple(y.shape)}; re-download or reinstall them")
    other = "fashion_mnist" if mnist else "mnist"
    if tuple(arrays["train_y"][:len(FIRST_LABELS[other])].tolist()) == FIRST_LABELS[other]:
        raise UserError(f"data.name={'mnist' if mnist else 'fashion_mnist'}, but data.root '{root}' holds "
                        f"{'Fashion-MNIST' if mnist else 'MNIST'}'s files (the same names; its first training labels "
                        f"are {'Fashion-MNIST' if mnist else 'MNIST'}'s): set data.name={other}, or data.root to "
                        f"{label}'s files")
    return ImageData(arrays["train_x"].unsqueeze(1), arrays["train_y"].long(),
                     arrays["test_x"].unsqueeze(1), arrays["test_y"].long(), SHAPES["mnist" if mnist else "fashion_mnist"][2])


# ``data.name`` -> its torchvision dataset class
TORCHVISION = {"cifar10": "CIFAR10", "cifar100": "CIFAR100", "svhn": "SVHN", "stl10": "STL10"}
# the datasets read from files: ``data.name`` -> (channels, image size, classes), what a model
# built for them needs to know (``empty_of_shape``)
SHAPES = {"fashion_mnist": (1, 28, 10), "mnist": (1, 28, 10), "cifar10": (3, 32, 10), "cifar100": (3, 32, 100),
          "svhn": (3, 32, 10), "stl10": (3, 96, 10), "femnist": (1, 28, 62)}


def empty_of_shape(name: str) -> ImageData:
    """A dataset of no samples shaped as ``name``'s (``SHAPES``): enough to build a method's model for
    it (its constructor's checks) where the files are not on this machine. A source whose shape only its
    files tell (``hf_disk``) is refused in one line."""
    if name not in SHAPES:
        raise UserError(f"data.name={name} takes its image shape and classes from its files, which are not on this "
                        "machine; check the recipe where data.root holds them")
    channels, size, classes = SHAPES[name]
    images, labels = torch.zeros(0, channels, size, size, dtype=torch.uint8), torch.zeros(0, dtype=torch.long)
    return ImageData(images, labels, images, labels, classes)


def _dataset_class(name: str) -> type:
    import torchvision.datasets as tvd

    return getattr(tvd, TORCHVISION[name])


def _torchvision(name: str, root: Path, download: bool) -> ImageData:
    cls = _dataset_class(name)

    def split(train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if name in ("cifar10", "cifar100"):
            ds = cls(str(root), train=train, download=download)
            x = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2)
            return x.contiguous(), torch.as_tensor(ds.targets, dtype=torch.long)
        ds = cls(str(root), split="train" if train else "test", download=download)
        return torch.from_numpy(np.ascontiguousarray(ds.data)), torch.as_tensor(ds.labels, dtype=torch.long)

    try:
        with warnings_if_it_works():
            (train_x, train_y), (test_x, test_y) = split(True), split(False)
    except OSError as exc:  # urllib's URLError and HTTPError are OSErrors
        if download:
            raise download_failed(name, root, exc) from None
        raise UserError(f"{name} in data.root '{root}' cannot be read ({type(exc).__name__}: {exc}); "
                        f"replace the files ({expected_layout(name)})") from None
    except RuntimeError as exc:
        if "not found" in str(exc) or "corrupted" in str(exc):  # torchvision says "not found or corrupted"
            damaged = _first_damaged(name, root)
            if damaged is not None:
                raise UserError(f"{name} file '{damaged}' fails its checksum: re-download it (delete it and set "
                                "data.download=true, or replace it)") from None
            raise not_found(name, root) from None
        raise UserError(f"{name} in data.root '{root}' cannot be read ({exc}); re-download it") from None
    except Exception as exc:  # malformed pickles / .mat / binaries raise anything
        fix = "replace the files" if download else "re-download it (data.download=true) or replace the files"
        raise UserError(f"{name} in data.root '{root}' cannot be read ({type(exc).__name__}: {exc}); "
                        f"{fix} ({expected_layout(name)})") from None
    return ImageData(train_x, train_y, test_x, test_y, SHAPES[name][2])


def _first_damaged(name: str, root: Path) -> Path | None:
    """The first of torchvision's files for dataset ``name`` under ``root`` that is there but fails its
    published MD5 (torchvision's ``check_integrity``), or None when every file there passes.

    torchvision reports a missing file and a damaged one alike ("not found or corrupted"); its
    dataset classes list the files and their checksums, which this reads to tell them apart.
    """
    from torchvision.datasets.utils import check_integrity

    cls = _dataset_class(name)
    if hasattr(cls, "split_list"):  # SVHN: one .mat file a split, in root itself
        files = [(root / cls.split_list[s][1], cls.split_list[s][2]) for s in ("train", "test")]
    else:  # CIFAR, STL-10: a folder of batches (and CIFAR's meta file)
        listed = [*cls.train_list, *cls.test_list, *([[cls.meta["filename"], cls.meta["md5"]]]
                                                      if hasattr(cls, "meta") else [])]
        files = [(root / cls.base_folder / file, md5) for file, md5 in listed]
    return next((path for path, md5 in files if path.is_file() and not check_integrity(str(path), md5)), None)


def synthetic(seed: int = 0, train: int = 1200, test: int = 300, classes: int = 10,
              channels: int = 3, size: int = 16) -> ImageData:
    """A learnable stand-in for real data: each class is a smooth random template plus noise."""
    g = torch_generator(seed, "synthetic-data")
    templates = torch.nn.functional.interpolate(
        torch.rand(classes, channels, 4, 4, generator=g), size=(size, size), mode="bilinear", align_corners=False
    )

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % classes
        y = y[torch.randperm(n, generator=g)]
        x = templates[y] + 0.25 * torch.randn(n, channels, size, size, generator=g)
        return (x.clamp(0, 1) * 255).round().to(torch.uint8), y

    (train_x, train_y), (test_x, test_y) = draw(train), draw(test)
    return ImageData(train_x, train_y, test_x, test_y, classes)


def load_dataset(name: str, root: str, download: bool, seed: int = 0,
                 columns: tuple[str, str, str | None] = ("image", "label", None)) -> ImageData:
    """Load dataset ``name`` (``data.name``) from ``root`` (``data.root``); ``columns``: ``hf_disk``'s
    image, label and group columns (``data.image_column``, ``data.label_column``, ``data.group_column``)."""
    check_root_length(name, root)
    loaders: dict[str, Callable[[], ImageData]] = {
        "fashion_mnist": lambda: _fashion_mnist(Path(root), download),
        "mnist": lambda: _fashion_mnist(Path(root), download, mnist=True),
        "synthetic": lambda: synthetic(seed),
        "diabetes": lambda: diabetes(seed),
        "femnist": lambda: femnist(Path(root)),
        "hf_disk": lambda: hf_disk(Path(root), *columns),
    }
    data = loaders[name]() if name in loaders else _torchvision(name, Path(root), download)
    check_shapes(data, f"{name} in data.root '{root}'")
    return data


def check_shapes(data: ImageData, what: str) -> None:
    """Raise a one-line UserError unless the samples are a non-empty (N, C, H, W) tensor (tabular
    data is (N, D, 1, 1)) with one label per sample, and labels in [0, num_classes)."""
    for split in ("train", "test"):
        x, y = getattr(data, f"{split}_x"), getattr(data, f"{split}_y")
        problem = None
        if x.ndim != 4:
            problem = f"{split} images have shape {tuple(x.shape)}, not (N, C, H, W)"
        elif y.ndim != 1 or len(y) != len(x):
            problem = f"{len(x)} {split} images but labels of shape {tuple(y.shape)}"
        elif len(y) == 0:
            problem = f"the {split} split is empty"
        elif int(y.min()) < 0 or int(y.max()) >= data.num_classes:
            problem = f"{split} labels span [{int(y.min())}, {int(y.max())}], not [0, {data.num_classes})"
        if problem:
            raise UserError(f"{what}: {problem}; re-download or replace the files")


def take_subset(data: ImageData, train: int | None, test: int | None, seed: int) -> ImageData:
    """Keep a seeded random ``train`` / ``test`` samples (``data.subset``, ``data.test_subset``), with
    their per-sample columns (protected attribute, group id)."""

    def keep(n: int | None, count: int, key: str) -> torch.Tensor | None:
        if n is None:
            return None
        if n > count:
            raise UserError(f"recipe key 'data.{key}' is {n} but the dataset has {count} samples; lower it")
        return subset_indices(count, n, seed, key)

    def pick(column: torch.Tensor | None, kept: torch.Tensor | None) -> torch.Tensor | None:
        return column if column is None or kept is None else column[kept]

    train_kept, test_kept = keep(train, len(data.train_y), "subset"), keep(test, len(data.test_y), "test_subset")
    return ImageData(pick(data.train_x, train_kept), pick(data.train_y, train_kept), pick(data.test_x, test_kept),
                     pick(data.test_y, test_kept), data.num_classes, pick(data.train_a, train_kept),
                     pick(data.test_a, test_kept), train_group=pick(data.train_group, train_kept))


def subset_indices(count: int, n: int, seed: int, key: str = "subset") -> torch.Tensor:
    """The (n,) sorted indices of the ``count`` samples that ``data.<key>=n`` keeps (``take_subset``)."""
    return torch.randperm(count, generator=torch_generator(seed, key))[:n].sort().values
