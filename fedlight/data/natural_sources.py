"""Sources whose samples say who made them: a group id per training image (``ImageData.train_group``),
which ``partition.kind=natural`` splits by.

- ``femnist``: LEAF's FEMNIST (Caldas et al. 2018, "LEAF: A Benchmark for Federated Settings") in
  LEAF's own JSON, ``data.root/train/*.json`` and ``data.root/test/*.json``, each
  ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 floats in [0, 1]]], "y": [ints]}}}``
  as LEAF's ``preprocess.sh`` writes them; the group is the writer (``users``), 62 classes.
- ``hf_disk``: any Hugging Face ``datasets`` dataset on disk: a ``DatasetDict`` written by
  ``save_to_disk`` with ``train`` and ``test`` splits, or ``train*.parquet`` / ``test*.parquet`` files
  under ``data.root`` (the hub's layout); its ``data.image_column``, ``data.label_column`` and
  (optional) ``data.group_column``. Needs the ``hf`` extra; read offline.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlight.data.image_data import ImageData
from fedlight.errors import UserError
from fedlight.optional import require_hf_datasets

FEMNIST_LAYOUT = ("data.root/train/*.json and data.root/test/*.json in LEAF's format (users, num_samples, "
                  "user_data with x and y), as LEAF's data/femnist/preprocess.sh writes them")
FEMNIST_CLASSES = 62  # digits, upper- and lower-case letters


def femnist(root: Path) -> ImageData:
    """LEAF's FEMNIST: (N, 1, 28, 28) uint8 images (LEAF's floats x 255, rounded: white background
    as LEAF stores it), labels in [0, 62), ``train_group`` the writer's index in sorted name order."""
    train_users, train_x, train_y = _leaf_split(root, "train")
    _, test_x, test_y = _leaf_split(root, "test")
    names = sorted(set(train_users))
    ids = {name: i for i, name in enumerate(names)}
    groups = torch.as_tensor([ids[u] for u in train_users], dtype=torch.long)
    return ImageData(train_x, train_y, test_x, test_y, FEMNIST_CLASSES, train_group=groups)


def _leaf_split(root: Path, split: str) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """Every sample of ``root/split/*.json`` in file-name and ``users`` order: its writer, the images
    (n, 1, 28, 28) uint8 and labels (n,) int64."""
    files = sorted((root / split).glob("*.json"))
    if not files:
        raise UserError(f"data.root '{root}' has no {split}/*.json (expected: {FEMNIST_LAYOUT}); point data.root "
                        "at LEAF's data/femnist/data folder")
    users, xs, ys = [], [], []
    for path in files:
        try:
            blob = json.loads(path.read_text())
            for user in blob["users"]:
                x, y = blob["user_data"][user]["x"], blob["user_data"][user]["y"]
                users += [user] * len(y)
                xs.append(np.asarray(x, dtype=np.float32).reshape(len(y), 1, 28, 28))
                ys.append(np.asarray(y, dtype=np.int64))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # json's errors are ValueErrors; reshape's too
            raise UserError(f"FEMNIST file '{path}' cannot be read ({type(exc).__name__}: {exc}); expected "
                            f"{FEMNIST_LAYOUT}: replace it") from None
    x = np.concatenate(xs) if xs else np.zeros((0, 1, 28, 28), np.float32)
    images = torch.from_numpy(np.clip(np.round(x * 255), 0, 255).astype(np.uint8))
    return users, images, torch.from_numpy(np.concatenate(ys) if ys else np.zeros(0, np.int64))


def require_datasets() -> Any:
    """The ``datasets`` module, imported offline, or a one-line UserError naming the extra."""
    require_hf_datasets("hf_disk")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # a dataset on disk: never the network
    import datasets

    return datasets


def hf_disk(root: Path, image_column: str, label_column: str, group_column: str | None) -> ImageData:
    """A saved ``datasets`` dataset (``save_to_disk`` or parquet files) as an ``ImageData``."""
    datasets = require_datasets()
    splits = _hf_splits(datasets, root)
    where = f"data.root '{root}'"
    columns = [("data.image_column", image_column), ("data.label_column", label_column)]
    for split in ("train", "test"):
        have = splits[split].column_names
        for key, name in columns + ([("data.group_column", group_column)] if group_column and split == "train" else []):
            if name not in have:
                raise UserError(f"{key}='{name}' is not a column of the {split} split in {where} (columns: "
                                f"{', '.join(have)}); set {key} to one of them")
    train = {name: splits["train"][name] for _, name in columns + [("", group_column)] if name}
    test = {name: splits["test"][name] for _, name in columns}
    return columns_to_data(train, test, image_column, label_column, group_column, where)


def _hf_splits(datasets: Any, root: Path) -> dict[str, Any]:
    """``{"train": Dataset, "test": Dataset}`` from ``root``: ``load_from_disk`` where it holds a saved
    DatasetDict, else its ``train*.parquet`` and ``test*.parquet`` files."""
    fix = ("save a DatasetDict with train and test splits there (dataset.save_to_disk), or put train*.parquet and "
           "test*.parquet files under it")
    if (root / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(root))
        if not all(split in loaded for split in ("train", "test")):
            raise UserError(f"the dataset in data.root '{root}' has splits {list(loaded)}, not train and test; {fix}")
        return {split: loaded[split] for split in ("train", "test")}
    files = {split: sorted(str(p) for p in root.rglob(f"{split}*.parquet")) for split in ("train", "test")}
    if not all(files.values()):
        raise UserError(f"data.root '{root}' holds no saved dataset (dataset_dict.json) and no train*.parquet and "
                        f"test*.parquet files; {fix}")
    return dict(datasets.load_dataset("parquet", data_files=files))


def columns_to_data(train: dict[str, list], test: dict[str, list], image_column: str, label_column: str,
                    group_column: str | None, where: str) -> ImageData:
    """Column lists (as ``Dataset[column]`` returns them) -> ``ImageData``.

    Args:
        train: the train split's columns: images (PIL images, ``{"bytes": png, "path": ...}`` as the
            ``Image`` feature stores them undecoded, or (H, W[, C]) arrays), integer labels, group ids
            (anything hashable; numbered in sorted order).
        test: the test split's image and label columns.
        where: names the data in errors.

    Returns:
        uint8 (N, C, H, W) images, labels in [0, max label + 1), ``train_group`` where ``group_column``.
    """
    train_x, test_x = _images(train[image_column], where), _images(test[image_column], where)
    if train_x.shape[1:] != test_x.shape[1:]:
        raise UserError(f"{where}: train images are {tuple(train_x.shape[1:])} but test images "
                        f"{tuple(test_x.shape[1:])}; give both splits one size")
    train_y, test_y = _labels(train[label_column], where), _labels(test[label_column], where)
    groups = None
    if group_column is not None:
        names = np.asarray([str(g) for g in train[group_column]])
        groups = torch.from_numpy(np.unique(names, return_inverse=True)[1].astype(np.int64))
    classes = int(max(train_y.max(), test_y.max())) + 1
    return ImageData(train_x, train_y, test_x, test_y, classes, train_group=groups)


def _images(column: list, where: str) -> torch.Tensor:
    """(N, C, H, W) uint8 from a column of images; every image must have the first's shape. Pixels that are
    not uint8 are scaled once for the whole column (of a split), not image by image: 16-bit ones by
    255 / 65535, other numbers x 255 where the column's largest is at most 1 (a [0, 1] float column), else
    clipped to [0, 255] (a dark image of a [0, 255] column, whose largest pixel is under 1, stays dark)."""
    arrays = [_pixels(item) for item in column]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise UserError(f"{where}: the images have {len(shapes)} shapes ({', '.join(map(str, sorted(shapes)[:3]))}, "
                        "...); resize them to one size before saving")
    numbers = [a for a in arrays if a.dtype not in (np.uint8, np.uint16)]
    unit = bool(numbers) and max(float(a.max(initial=0)) for a in numbers) <= 1
    arrays = [_as_uint8(a, unit) for a in arrays]
    stacked = np.stack(arrays) if arrays else np.zeros((0, 1, 1, 1), np.uint8)
    return torch.from_numpy(stacked if stacked.ndim == 4 else stacked[:, None])


def _pixels(item: Any) -> np.ndarray:
    """One image as an (H, W) or (C, H, W) array: a PIL image in its colours (a palette image's, not its
    indices; an alpha channel dropped), 16-bit ones as uint16; an array as it is."""
    if isinstance(item, dict):  # the Image feature undecoded: {"bytes": ..., "path": ...}
        from PIL import Image

        item = Image.open(io.BytesIO(item["bytes"])) if item.get("bytes") else Image.open(item["path"])
    mode = getattr(item, "mode", None)
    if mode is not None and mode not in ("L", "RGB") and not mode.startswith(("I", "F")):
        item = item.convert("L" if mode in ("1", "LA") else "RGB")  # palette, alpha, CMYK, YCbCr, ...
    array = np.asarray(item)
    if mode is not None and mode.startswith("I;16"):
        array = array.astype(np.uint16)
    return array.transpose(2, 0, 1) if array.ndim == 3 else array


def _as_uint8(array: np.ndarray, unit: bool) -> np.ndarray:
    """``array`` as uint8 pixels: 16-bit scaled by 255 / 65535, other numbers x 255 where ``unit`` (the column
    is in [0, 1]), else rounded and clipped to [0, 255]."""
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.uint16:
        return np.round(array / 257).astype(np.uint8)
    return np.clip(np.round(array * 255 if unit else array), 0, 255).astype(np.uint8)


def _labels(column: list, where: str) -> torch.Tensor:
    """(N,) int64 labels; refused unless whole numbers >= 0."""
    labels = np.asarray(column)
    if labels.dtype.kind not in "iu" or (len(labels) and labels.min() < 0):
        raise UserError(f"{where}: the labels are {labels.dtype} values, not class numbers >= 0; set "
                        "data.label_column to an integer (ClassLabel) column")
    return torch.from_numpy(labels.astype(np.int64))
