"""Where a dataset's files lie under ``data.root``, found without reading them (torch-free).

``fedlight fit`` asks before it imports torch, so a ``data.root`` without the data is one line
within a second; ``sources`` asks again when it reads the files.
"""

from __future__ import annotations

from pathlib import Path

from fedlight.config.files import length_problem
from fedlight.errors import UserError

# the IDX files of Fashion-MNIST and MNIST (the same names), which fedlight reads itself
IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
TORCHVISION_DATASETS = ("cifar10", "cifar100", "svhn", "stl10")  # read through torchvision.datasets


def find_idx(root: Path, stem: str, mnist: bool = False) -> Path | None:
    """The IDX file ``stem`` (or ``stem.gz``) in ``root`` or torchvision's download folder, or None."""
    for folder in (root, root / ("MNIST" if mnist else "FashionMNIST") / "raw"):
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return folder / name
    return None


def missing_idx(root: Path, stem: str, mnist: bool = False) -> UserError:
    """The one-line error for an IDX file ``stem`` that ``root`` does not hold."""
    label = "MNIST" if mnist else "Fashion-MNIST"
    hint = ("" if mnist else "run 'apt-get install dataset-fashion-mnist' and set "
            "data.root=/usr/share/datasets/fashion-mnist, or ")
    return UserError(f"data.root '{root}' has no {label} file '{stem}[.gz]'; {hint}set data.download=true")


def not_found(name: str, root: str | Path, why: str = "") -> UserError:
    """The one-line error for a dataset torchvision reads that ``root`` does not hold."""
    return UserError(f"{name} not found in data.root '{root}'{why}; point data.root at a folder holding it "
                     "or set data.download=true (needs internet)")


def check_root_length(name: str, root: str) -> None:
    """Raise a one-line UserError if ``root`` is too long a path for a dataset read from files."""
    too_long = length_problem(root) if name in ("fashion_mnist", "mnist", *TORCHVISION_DATASETS) else None
    if too_long:
        raise UserError(f"data.root {too_long}; set data.root to a shorter path")


def check_data_root(name: str, root: str, download: bool) -> None:
    """Raise the one-line UserError ``load_dataset`` would for data that is not there at all.

    Without ``download``: every IDX file of Fashion-MNIST / MNIST must be found, and a dataset
    torchvision reads needs ``root`` to be a folder (whether its files are whole, torchvision
    checks when it reads them). Synthetic and tabular data need no files.
    """
    check_root_length(name, root)
    if download:
        return
    if name in ("fashion_mnist", "mnist"):
        for stem in IDX_FILES.values():
            if find_idx(Path(root), stem, mnist=name == "mnist") is None:
                raise missing_idx(Path(root), stem, mnist=name == "mnist")
    elif name in TORCHVISION_DATASETS and not Path(root).is_dir():
        raise not_found(name, root, " (no such folder)")
