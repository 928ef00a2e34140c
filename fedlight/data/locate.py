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
FOLDER_DATASETS = ("femnist", "hf_disk")  # read from a folder by fedlight.data.natural_sources


def find_idx(root: Path, stem: str, mnist: bool = False) -> Path | None:
    """The IDX file ``stem`` (or ``stem.gz``) in ``root`` or torchvision's download folder, or None."""
    for folder in (root, root / ("MNIST" if mnist else "FashionMNIST") / "raw"):
        for name in (stem, stem + ".gz"):
            if (folder / name).is_file():
                return folder / name
    return None


# data.name -> the files it reads under data.root, as torchvision's downloads lay them out
LAYOUTS = {
    "fashion_mnist": "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
                     "t10k-labels-idx1-ubyte (each may end in .gz), in data.root or in data.root/FashionMNIST/raw/",
    "mnist": "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
             "t10k-labels-idx1-ubyte (each may end in .gz), in data.root or in data.root/MNIST/raw/",
    "cifar10": "data.root/cifar-10-batches-py/ with data_batch_1 .. data_batch_5, test_batch and batches.meta",
    "cifar100": "data.root/cifar-100-python/ with train, test and meta",
    "svhn": "data.root/train_32x32.mat and data.root/test_32x32.mat",
    "stl10": "data.root/stl10_binary/ with train_X.bin, train_y.bin, test_X.bin, test_y.bin and class_names.txt",
    "femnist": "data.root/train/*.json and data.root/test/*.json in LEAF's format",
    "hf_disk": "a dataset saved there by save_to_disk (train and test splits), or train*.parquet and test*.parquet files",
}


def expected_layout(name: str) -> str:
    """``'expected: <the files data.root holds for dataset name>'``, for the data errors."""
    return f"expected: {LAYOUTS[name]}"


def missing_idx(root: Path, stem: str, mnist: bool = False) -> UserError:
    """The one-line error for an IDX file ``stem`` that ``root`` does not hold."""
    label = "MNIST" if mnist else "Fashion-MNIST"
    hint = ("" if mnist else "run 'apt-get install dataset-fashion-mnist' and set "
            "data.root=/usr/share/datasets/fashion-mnist, or ")
    layout = expected_layout("mnist" if mnist else "fashion_mnist")
    return UserError(f"data.root '{root}' has no {label} file '{stem}[.gz]' ({layout}); {hint}set data.download=true")


def not_found(name: str, root: str | Path, why: str = "") -> UserError:
    """The one-line error for a dataset torchvision reads that ``root`` does not hold."""
    return UserError(f"{name} not found in data.root '{root}'{why} ({expected_layout(name)}); point data.root at a "
                     "folder holding it or set data.download=true (needs internet)")


def download_failed(name: str, root: str | Path, exc: BaseException) -> UserError:
    """The one-line error for a ``data.download=true`` that could not download ``name``."""
    return UserError(f"downloading {name} into data.root '{root}' failed ({type(exc).__name__}: {exc}); without "
                     f"internet, copy the files there ({expected_layout(name)}) and set data.download=false")


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
    if name in FOLDER_DATASETS and not Path(root).is_dir():  # nothing to download: the user's own files
        raise UserError(f"{name} not found in data.root '{root}' (no such folder; {expected_layout(name)}); point "
                        "data.root at the folder holding it")
    if download:
        return
    if name in ("fashion_mnist", "mnist"):
        for stem in IDX_FILES.values():
            if find_idx(Path(root), stem, mnist=name == "mnist") is None:
                raise missing_idx(Path(root), stem, mnist=name == "mnist")
    elif name in TORCHVISION_DATASETS and not Path(root).is_dir():
        raise not_found(name, root, " (no such folder)")


def data_on_disk(name: str, root: str, download: bool) -> bool:
    """Whether ``load_dataset`` reads ``name`` from ``root`` without downloading: the files
    ``check_data_root`` looks for are there (synthetic and tabular data need none). A dataset
    torchvision reads with ``download`` set counts as absent: torchvision would fetch what is missing.
    """
    if download and name in TORCHVISION_DATASETS:
        return False
    try:
        check_data_root(name, root, download=False)
    except UserError:
        return False
    return True
