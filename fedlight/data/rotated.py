"""A rotated view of a dataset: the new device of LG-FedAvg sec. 3.2 / Table 3 (Liang et al. 2020).

Sec. 7.2: "an additional device, which randomly samples 3000 and 500 images from the train and
test sets respectively and rotates them by a fixed 90 degrees". The device's training images are
appended to the federation's training set (a client of its own); its test images stay apart, so
the run's own test split (probe, kNN, ``test_acc``) is the original one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.transforms.functional import rotate

from fedlight.data.image_data import ImageData
from fedlight.errors import UserError
from fedlight.seeding import torch_generator


@dataclass
class RotatedDevice:
    """The new device's data.

    Attributes:
        data: the federation's data with the device's (rotated) training images appended.
        parts: every client's indices into ``data.train_x``; the device's is the last.
        test_x: (T, C, H, W) uint8 rotated test images; test_y: (T,) their labels.
        train_source: (S,) indices of the original training images the device rotated;
            test_source: (T,) the same for the test images.
    """

    data: ImageData
    parts: list[np.ndarray]
    test_x: torch.Tensor
    test_y: torch.Tensor
    train_source: torch.Tensor
    test_source: torch.Tensor


def rotated_images(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """(N, C, H, W) uint8 images turned ``degrees`` counter-clockwise about their centre, same shape
    (torchvision's ``rotate``, nearest neighbour: a multiple of 90 degrees only moves pixels)."""
    return rotate(images, degrees)


def check_device_fits(data: ImageData, train: int, test: int) -> None:
    """Raises a UserError if the splits hold fewer than the new device's ``train`` / ``test`` images."""
    for key, n, have in (("train", train, len(data.train_y)), ("test", test, len(data.test_y))):
        if n > have:
            raise UserError(f"recipe key 'new_device.{key}' is {n} but the {key} split has {have} images; lower it")


def add_rotated_device(data: ImageData, parts: list[np.ndarray], degrees: float, train: int, test: int,
                       seed: int) -> RotatedDevice:
    """A new client holding ``train`` seeded random training images rotated by ``degrees``, and its
    ``test`` rotated test images (``new_device.*``; raises a UserError if the data has too few)."""
    check_device_fits(data, train, test)
    g = torch_generator(seed, "new-device")
    train_source = torch.randperm(len(data.train_y), generator=g)[:train].sort().values
    test_source = torch.randperm(len(data.test_y), generator=g)[:test].sort().values
    n = len(data.train_y)
    grown = ImageData(torch.cat([data.train_x, rotated_images(data.train_x[train_source], degrees)]),
                      torch.cat([data.train_y, data.train_y[train_source]]), data.test_x, data.test_y,
                      data.num_classes,
                      None if data.train_a is None else torch.cat([data.train_a, data.train_a[train_source]]),
                      data.test_a)
    return RotatedDevice(grown, [*parts, np.arange(n, n + train, dtype=np.int64)],
                         rotated_images(data.test_x[test_source], degrees), data.test_y[test_source],
                         train_source, test_source)
