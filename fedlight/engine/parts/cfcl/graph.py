"""The device graph of CF-CL: who can exchange data with whom (D2D links).

CF-CL (Wagle et al. 2022, Sec. IV) uses a random geometric graph (RGG) with average node
degree 3, the usual model of wireless peer-to-peer networks; ``ring`` and ``complete``
serve ablations. Graphs are (K, K) symmetric boolean adjacency matrices without self-loops.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def is_connected(adj: np.ndarray) -> bool:
    """Whether every node reaches every other (breadth-first search from node 0)."""
    seen, frontier = {0}, [0]
    while frontier:
        i = frontier.pop()
        for j in np.flatnonzero(adj[i]).tolist():
            if j not in seen:
                seen.add(j)
                frontier.append(j)
    return len(seen) == len(adj)


def random_geometric_graph(n: int, avg_degree: float, rng: np.random.Generator,
                           max_tries: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """A connected RGG on ``n`` devices dropped uniformly in the unit square.

    The radius is the distance of the ``round(n * avg_degree / 2)``-th closest pair, so the
    graph has exactly that many edges and its average degree is ``avg_degree`` (up to
    rounding); positions are redrawn until the graph is connected.

    Returns:
        adjacency (n, n) bool and positions (n, 2).
    """
    edges = int(round(n * avg_degree / 2))
    if not n - 1 <= edges <= n * (n - 1) // 2:
        raise ValueError(f"average degree {avg_degree} on {n} devices gives {edges} edges; "
                         f"a connected graph needs {n - 1} to {n * (n - 1) // 2}")
    iu = np.triu_indices(n, 1)
    for _ in range(max_tries):
        pos = rng.random((n, 2))
        dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        order = np.argsort(dist[iu], kind="stable")[:edges]
        adj = np.zeros((n, n), dtype=bool)
        adj[iu[0][order], iu[1][order]] = True
        adj |= adj.T
        if is_connected(adj):
            return adj, pos
    raise RuntimeError(f"no connected RGG with average degree {avg_degree} on {n} devices in {max_tries} draws")


def ring(n: int) -> np.ndarray:
    """Device i linked to i-1 and i+1 (mod n)."""
    adj = np.zeros((n, n), dtype=bool)
    for i in range(n):
        adj[i, (i + 1) % n] = adj[(i + 1) % n, i] = n > 1
    np.fill_diagonal(adj, False)
    return adj


def complete(n: int) -> np.ndarray:
    """Every device linked to every other."""
    return ~np.eye(n, dtype=bool)


def build_graph(kind: str, n: int, avg_degree: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``exchange.graph`` (rgg | ring | complete): adjacency (n, n) and drawing positions (n, 2)."""
    if kind == "rgg":
        return random_geometric_graph(n, avg_degree, rng)
    angle = 2 * np.pi * np.arange(n) / max(n, 1)
    pos = 0.5 + 0.45 * np.stack([np.cos(angle), np.sin(angle)], 1)
    return (ring(n) if kind == "ring" else complete(n)), pos


def neighbours(adj: np.ndarray) -> list[list[int]]:
    """Sorted neighbour ids of every device."""
    return [np.flatnonzero(row).tolist() for row in adj]


def graph_figure(adj: np.ndarray, pos: np.ndarray, title: str = "device graph") -> Any:
    """The devices at ``pos`` with their D2D links (for TensorBoard)."""
    fig, ax = plt.subplots(figsize=(4, 4))
    for i, j in zip(*np.nonzero(np.triu(adj))):
        ax.plot(pos[[i, j], 0], pos[[i, j], 1], color="0.6", zorder=1)
    ax.scatter(pos[:, 0], pos[:, 1], s=300, color="tab:blue", zorder=2)
    for i, (x, y) in enumerate(pos):
        ax.text(x, y, str(i), ha="center", va="center", color="white", zorder=3)
    ax.set_title(f"{title}: {len(adj)} devices, average degree {adj.sum() / max(len(adj), 1):.2f}")
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    return fig
