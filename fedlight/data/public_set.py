"""A class-balanced public set drawn outside the training subset (``partition.public_balanced``).

FLESD's public set is the public client's Dirichlet share, which at a small alpha holds a few
classes. This draws, instead, a seeded sample of the same size from the training images that
``data.subset`` leaves out: ``size // C`` images of each of the C classes, the first
``size mod C`` classes one more. The clients' data, the evaluation's labelled bank and the test
set are those of the run without it; only the public set's make-up differs.
"""

from __future__ import annotations

import torch

from fedlight.data.sources import subset_indices
from fedlight.errors import UserError
from fedlight.seeding import torch_generator


def balanced_outside_subset(labels: torch.Tensor, subset: int, size: int, num_classes: int,
                            seed: int) -> torch.Tensor:
    """The indices of a class-balanced sample of ``size`` training images outside ``data.subset``.

    Args:
        labels: (N,) int64 labels of the whole training split, before ``data.subset``.
        subset: ``data.subset``: the run keeps ``subset_indices(N, subset, seed)`` of them.
        size: images in the public set (the public client's share).
        num_classes: C.
        seed: run seed.

    Returns:
        (size,) int64 sorted indices into the whole training split, none of them in the subset,
        ``size // C`` of each class and one more of each of the first ``size mod C``.

    Raises:
        UserError: a class has fewer images outside the subset than its share.
    """
    outside = torch.ones(len(labels), dtype=torch.bool)
    outside[subset_indices(len(labels), subset, seed)] = False
    generator = torch_generator(seed, "public-balanced")
    picked = []
    for c in range(num_classes):
        wanted = size // num_classes + (c < size % num_classes)
        pool = torch.nonzero(outside & (labels == c)).squeeze(1)
        if len(pool) < wanted:
            raise UserError(f"partition.public_balanced needs {wanted} images of class {c} outside "
                            f"data.subset={subset} but {len(pool)} are left; lower data.subset or set "
                            "partition.public_balanced=false")
        picked.append(pool[torch.randperm(len(pool), generator=generator)[:wanted]])
    return torch.cat(picked).sort().values
