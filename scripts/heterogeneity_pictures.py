"""Draws docs/images/heterogeneity_*.png, the pictures of docs/heterogeneity.md: every partition kind on
6,000 Fashion-MNIST training images over 20 clients (seed 0), with the picture a run shows in TensorBoard
and ``fedlight report`` (``fedlight.data.partition_picture``), and the feature-shift transforms on eight images.

    PYTHONPATH=$PWD .venv/bin/python scripts/heterogeneity_pictures.py [--root /usr/share/datasets/fashion-mnist]

The natural partition's writer ids are drawn here (Zipf-sized writers, each preferring three classes), since
no writer-labelled data ships with the machine; a run reads them from FEMNIST or a dataset's group column.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from fedlight.data.domain_names import DOMAIN_NAMES
from fedlight.data.domains import domain_transforms, shift_features
from fedlight.data.partition import partition
from fedlight.data.partition_picture import partition_picture, partition_summary
from fedlight.data.sources import load_dataset, take_subset
from fedlight.seeding import numpy_rng

OUT = Path(__file__).resolve().parents[1] / "docs" / "images"
CLIENTS = 20
# picture name -> (partition.kind, its options, what the title says)
KINDS = {"iid": ("iid", {}, "iid"), "dirichlet": ("dirichlet", {"alpha": 0.5}, "dirichlet, alpha 0.5"),
         "shards": ("shards", {}, "shards, 2 a client"), "classes": ("classes", {}, "classes, 2 a client"),
         "class_ring": ("class_ring", {}, "class_ring, 2 a client"),
         "quantity_lognormal": ("quantity", {"law": "lognormal", "sigma": 1.0}, "quantity, lognormal sigma 1"),
         "quantity_power_law": ("quantity", {"law": "power_law", "exponent": 1.0}, "quantity, power law exponent 1")}
SHIFT = ["identity", "rotate", "contrast", "blur", "noise"]


def writer_ids(labels: np.ndarray, writers: int, rng: np.random.Generator) -> np.ndarray:
    """(N,) a writer for every sample: writer w's share of the data ~ 1 / (w + 1), three preferred classes each."""
    share = 1 / np.arange(1, writers + 1)
    likes = np.stack([rng.choice(10, 3, replace=False) for _ in range(writers)])
    weight = share[:, None] * (1 + 9 * (np.arange(10)[None] == likes[..., None]).any(1))  # (writers, 10)
    return np.array([rng.choice(writers, p=weight[:, y] / weight[:, y].sum()) for y in labels])


def save(fig: plt.Figure, name: str) -> None:
    fig.savefig(OUT / f"heterogeneity_{name}.png", dpi=80, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/usr/share/datasets/fashion-mnist")
    root = parser.parse_args().root
    OUT.mkdir(parents=True, exist_ok=True)
    data = take_subset(load_dataset("fashion_mnist", root, False), 6000, None, 0)
    labels = data.train_y.numpy()
    for name, (kind, options, title) in KINDS.items():
        parts = partition(kind, labels, CLIENTS, numpy_rng(0, "partition"), **options)
        save(partition_picture(partition_summary(labels, parts, 10), title), name)
    groups = writer_ids(labels, 60, np.random.default_rng(0))
    parts = partition("natural", labels, CLIENTS, numpy_rng(0, "partition"), groups=groups)
    save(partition_picture(partition_summary(labels, parts, 10), "natural, 20 of 60 (drawn) writers"), "natural")
    rng = numpy_rng(0, "partition")
    split = lambda idx, k: partition("dirichlet", labels[idx], k, rng, alpha=0.5)  # noqa: E731
    shifted = shift_features(data, SHIFT, CLIENTS, numpy_rng(0, "domains"), split)
    summary = partition_summary(labels, shifted.parts, 10, shifted.data.train_domain.numpy(), tuple(SHIFT))
    save(partition_picture(summary, "feature shift: 5 domains, dirichlet 0.5 within each"), "feature_shift")
    save(transforms_grid(data.train_x[:8]), "transforms")


def transforms_grid(images: torch.Tensor) -> plt.Figure:
    """One row a transform of ``DOMAIN_NAMES`` (seed 0's parameters) over the same eight images."""
    names = [n for n in DOMAIN_NAMES if n != "colour"]  # colour shifts hue: RGB images only
    fig, axes = plt.subplots(len(names), len(images), figsize=(len(images) * 0.9, len(names) * 0.95))
    for row, (name, transform) in enumerate(zip(names, domain_transforms(names, numpy_rng(0, "domains")))):
        for col, image in enumerate(transform(images)):
            axes[row, col].imshow(image[0].numpy(), cmap="gray", vmin=0, vmax=255)
            axes[row, col].set_xticks([])
            axes[row, col].set_yticks([])
        axes[row, 0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=9)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main()
