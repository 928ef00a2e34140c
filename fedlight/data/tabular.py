"""Tabular data with a protected attribute, held as 1 x 1 "images" with one channel per feature.

The engine keeps every dataset as uint8 (N, C, H, W); a table of F features becomes
(N, F, 1, 1), each feature min-max scaled to 0..255 on the training split (8-bit
quantisation) and standardised per channel by the view maker. Recipes on tabular data
must switch augmentation off (``configs/data/diabetes.yaml`` does).
"""

from __future__ import annotations

import numpy as np
import torch

from fedlight.data.image_data import ImageData
from fedlight.optional import require_sklearn
from fedlight.seeding import numpy_rng


def quantize(train: np.ndarray, test: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, F) and (M, F) floats -> uint8 (N, F, 1, 1), (M, F, 1, 1), scaled by the training min / max."""
    low, high = train.min(0), train.max(0)
    scale = np.where(high > low, high - low, 1.0)

    def q(x: np.ndarray) -> torch.Tensor:
        u = np.clip(np.round((x - low) / scale * 255), 0, 255).astype(np.uint8)
        return torch.from_numpy(u[:, :, None, None])

    return q(train), q(test)


def diabetes(seed: int = 0, test_fraction: float = 0.2) -> ImageData:
    """scikit-learn's bundled diabetes table (Efron et al. 2004; 442 patients, 10 features), offline.

    Task: is the disease progression one year on above its median (binary, balanced);
    protected attribute: the ``sex`` column (1 / 2 in the raw table -> 0 / 1), which stays among
    the inputs, as race and gender do in LG-FedAvg's UCI adult experiment (section 3.3).
    The train / test split is a seeded ``test_fraction`` draw.
    """
    require_sklearn("data.name=diabetes (scikit-learn's table, and the fairness probe on it)")
    from sklearn.datasets import load_diabetes

    table = load_diabetes(scaled=False)
    x, target = table.data.astype(np.float64), table.target
    sex = x[:, table.feature_names.index("sex")]
    y = (target > np.median(target)).astype(np.int64)
    a = (sex == sex.max()).astype(np.int64)
    order = numpy_rng(seed, "diabetes-split").permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    train_x, test_x = quantize(x[train], x[test])
    return ImageData(train_x, torch.from_numpy(y[train]), test_x, torch.from_numpy(y[test]), num_classes=2,
                     train_a=torch.from_numpy(a[train]), test_a=torch.from_numpy(a[test]))
