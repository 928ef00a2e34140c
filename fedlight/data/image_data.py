"""The dataset every source becomes: uint8 image tensors (N, C, H, W) plus int64 labels.

Its own module so that each source (``sources.py``, ``tabular.py``, ``rotated.py``) builds on it
without importing another source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class ImageData:
    """A labelled image dataset held as tensors.

    Attributes:
        train_x: (N, C, H, W) uint8 training images.
        train_y: (N,) int64 training labels.
        test_x: (M, C, H, W) uint8 test images.
        test_y: (M,) int64 test labels.
        num_classes: number of classes.
        train_a: (N,) int64 protected attribute (0 / 1), for datasets that carry one (fair LG-FedAvg).
        test_a: (M,) int64 protected attribute of the test samples.
        public_x: (P, C, H, W) uint8 images that replace the public client's share as FLESD's public
            set, drawn outside ``train_x`` (``partition.public_balanced``); None: the share itself.
        public_y: (P,) int64 their labels (the partition's record only: the public set is read unlabelled).
        train_group: (N,) int64 id of who made each training image (a writer, user or device), for
            sources that carry one (``partition.kind=natural``); None: no such column.
        train_domain: (N,) int64 domain of each training image under feature shift
            (``partition.domains``, ``fedlight.data.domains``); None: no feature shift.
        test_domain: (M,) int64 domain of each test image (per-domain evaluation); None: none.
        domain_names: the transform of each domain, in domain order (empty without feature shift).
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    train_a: torch.Tensor | None = None
    test_a: torch.Tensor | None = None
    public_x: torch.Tensor | None = None
    public_y: torch.Tensor | None = None
    train_group: torch.Tensor | None = None
    train_domain: torch.Tensor | None = None
    test_domain: torch.Tensor | None = None
    domain_names: tuple[str, ...] = ()

    @property
    def channels(self) -> int:
        return self.train_x.shape[1]

    @property
    def image_size(self) -> int:
        return self.train_x.shape[-1]

    def domain_ids(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Under feature shift the (N,) training and (M,) test images' domains, else None."""
        if self.train_domain is None or self.test_domain is None:
            return None
        return self.train_domain.numpy(), self.test_domain.numpy()

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel mean and std of the training images in [0, 1], shapes (C,)."""
        x = self.train_x[:10000].float().div_(255)
        return x.mean(dim=(0, 2, 3)), x.std(dim=(0, 2, 3))
