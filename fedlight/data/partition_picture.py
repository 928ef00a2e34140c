"""The picture of a partition: every client's size, label histogram and domain, side by side.

Torch-free (numpy and matplotlib), so ``fedlight report`` draws it from a run folder's
``partition.json`` on a login node, and the run draws the same picture into TensorBoard.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedlight.atomic_files import atomic_write_bytes  # noqa: E402

PARTITION_FILE = "partition.json"  # in the run folder, written when the run starts
MOST_CLIENTS = 200  # clients drawn; a larger federation shows its first 200 (the title says so)


def partition_summary(labels: np.ndarray, parts: list[np.ndarray], num_classes: int,
                      sample_domain: np.ndarray | None = None, domain_names: tuple[str, ...] = (),
                      public_client: int | None = None, public_labels: np.ndarray | None = None) -> dict[str, Any]:
    """What the picture shows, JSON-ready.

    Args:
        labels: (N,) training labels.
        parts: every client's indices into them.
        num_classes: C.
        sample_domain: (N,) each sample's domain under feature shift; None: no domains.
        domain_names: the transform of each domain.
        public_client: the client whose share never trains (FLESD's public set); None: none.
        public_labels: (P,) labels of the set that replaces that share (``partition.public_balanced``).

    Returns:
        ``sizes`` (K,), ``label_counts`` (K, C), ``domain`` (K,) or None (a client's domain: its first
        sample's, the same for all of them), ``domain_names``, ``public_client`` and
        ``public_set_label_counts`` (C,): the labels of the public set used, the balanced draw's where one
        replaces the share, else the public client's row (None without a public client).
    """
    counts = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
    domain = None if sample_domain is None else [int(sample_domain[p[0]]) if len(p) else -1 for p in parts]
    public = (None if public_client is None else counts[public_client].tolist() if public_labels is None
              else np.bincount(public_labels, minlength=num_classes).tolist())
    return {"sizes": [len(p) for p in parts], "label_counts": counts.tolist(), "domain": domain,
            "domain_names": list(domain_names), "public_client": public_client, "public_set_label_counts": public}


def write_summary(summary: dict[str, Any], run_dir: Path) -> None:
    """``run_dir/partition.json``, written whole."""
    atomic_write_bytes(run_dir / PARTITION_FILE, json.dumps(summary).encode(), then="start the run again")


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's ``partition.json``, or None where it has none (runs from before it) or it cannot be read."""
    try:
        summary = json.loads((run_dir / PARTITION_FILE).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and {"sizes", "label_counts"} <= summary.keys() else None


def partition_picture(summary: dict[str, Any], title: str = "partition") -> Any:
    """Three panels sharing the client axis: samples a client holds (bars), the share of each class
    among them (heat map: the label histogram, each row summing to 1) and the client's domain (a colour
    a domain, named in its legend; one grey strip without feature shift)."""
    sizes = np.asarray(summary["sizes"])[:MOST_CLIENTS]
    counts = np.asarray(summary["label_counts"], dtype=float)[:MOST_CLIENTS]
    k, c = counts.shape
    domain = summary.get("domain")
    fig, (bars, heat, strip) = plt.subplots(1, 3, sharey=True, figsize=(4 + max(4.0, c * 0.35), max(3.0, k * 0.18)),
                                            gridspec_kw={"width_ratios": [2, max(3, c * 0.35), 0.6]})
    clients = np.arange(k)
    bars.barh(clients, sizes, color="tab:blue")
    bars.invert_xaxis()
    bars.set_xlabel("samples")
    bars.set_ylabel("client")
    bars.yaxis.set_major_locator(MaxNLocator(integer=True))
    shares = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    image = heat.imshow(shares, aspect="auto", cmap="viridis", interpolation="nearest", vmin=0, vmax=1,
                        extent=(-0.5, c - 0.5, k - 0.5, -0.5))
    heat.set_xlabel("class")
    fig.colorbar(image, ax=heat, label="share of the client's samples", fraction=0.05)
    _domain_strip(strip, domain[:MOST_CLIENTS] if domain is not None else None, summary.get("domain_names") or [], k)
    shown = f" (first {MOST_CLIENTS} of {len(summary['sizes'])})" if len(summary["sizes"]) > MOST_CLIENTS else ""
    public = summary.get("public_client")
    note = "" if public is None else f"; client {public} public (never trains)"
    fig.suptitle(f"{title}: {len(summary['sizes'])} clients{shown}, {c} classes, sizes {sizes.min()}-{sizes.max()}"
                 f"{note}")
    fig.tight_layout()
    return fig


def _domain_strip(ax: Any, domain: list[int] | None, names: list[str], k: int) -> None:
    """One cell a client, coloured by its domain."""
    ids = np.zeros((k, 1)) if domain is None else np.asarray(domain, dtype=float)[:, None]
    palette = plt.get_cmap("tab10").colors if domain is not None else [(0.8, 0.8, 0.8)]
    count = max(len(names), 1)
    ax.imshow(ids, aspect="auto", cmap=ListedColormap(palette[:count]), vmin=-0.5, vmax=count - 0.5,
              interpolation="nearest", extent=(-0.5, 0.5, k - 0.5, -0.5))
    ax.set_xticks([])
    ax.set_xlabel("domain")
    if domain is not None:
        handles = [plt.Rectangle((0, 0), 1, 1, color=palette[i % len(palette)]) for i in range(len(names))]
        ax.legend(handles, [f"{i}: {n}" for i, n in enumerate(names)], loc="upper left", bbox_to_anchor=(1.05, 1),
                  fontsize=7, title="domain", title_fontsize=7)
