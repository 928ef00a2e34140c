"""What the run shows in TensorBoard besides scalars: the partition and the embedding."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def partition_figure(counts: np.ndarray, title: str = "partition") -> Any:
    """Heat map of a (K clients, C classes) count matrix."""
    k, c = counts.shape
    fig, ax = plt.subplots(figsize=(max(4, c * 0.5), max(3, min(k, 100) * 0.25)))
    image = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(f"{title}: {k} clients x {c} classes")
    fig.colorbar(image, ax=ax, label="samples")
    fig.tight_layout()
    return fig


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> ``{"a/b": value}`` with scalars kept and anything else as text."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, name))
        else:
            out[name] = value if isinstance(value, (int, float, str, bool)) else str(value)
    return out
