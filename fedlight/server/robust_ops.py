"""Pure tensor math of the robust aggregation rules, on stacked client values.

Each rule takes ``x`` of shape ``(n, ...)``: one row per client, in client order, float64
(``fedlight.server.ops``: ``stack_states`` for a coordinate-wise rule, ``flatten_states`` for one on
whole vectors). Exported from ``fedlight`` for aggregators of other packages.

A rule on models equals the rule on updates (model minus the global model) shifted by the
global model: the coordinate-wise rules commute with a common shift and Krum's distances do
not see it, so the servers apply them to the payloads as sent.
"""

from __future__ import annotations

import torch


def coordinate_median(x: torch.Tensor) -> torch.Tensor:
    """The median of each coordinate over the n rows (the mean of the two middle values for even n).

    Args:
        x: ``(n, ...)``.
    Returns:
        ``(...)``.

    Examples:
        >>> coordinate_median(torch.tensor([[0.0, 5.0], [1.0, -1.0], [100.0, 2.0]]))
        tensor([1., 2.])
    """
    s, n = x.sort(dim=0).values, x.shape[0]
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def trimmed_mean(x: torch.Tensor, k: int) -> torch.Tensor:
    """Each coordinate's mean after dropping its ``k`` smallest and ``k`` largest values (``2k < n``).

    Args:
        x: ``(n, ...)``.
    Returns:
        ``(...)``.

    Examples:
        >>> trimmed_mean(torch.tensor([[-50.0], [1.0], [2.0], [3.0], [90.0]]), k=1)
        tensor([2.])
    """
    n = x.shape[0]
    if not 0 <= 2 * k < n:
        raise ValueError(f"cannot trim {k} values from each side of {n}")
    return x.sort(dim=0).values[k:n - k].mean(dim=0)


def krum_scores(x: torch.Tensor, f: int) -> torch.Tensor:
    """Krum's score of each row: the sum of its squared distances to its ``n - f - 2`` nearest
    other rows (Blanchard et al. 2017, sec. 4), at least one neighbour.

    Args:
        x: ``(n, D)``.
    Returns:
        ``(n,)`` float64.
    """
    n = x.shape[0]
    if n == 1:
        return torch.zeros(1, dtype=torch.float64)
    d2 = torch.cdist(x, x).square()
    d2.fill_diagonal_(float("inf"))  # a row is not its own neighbour
    neighbours = min(n - 1, max(1, n - f - 2))
    return d2.sort(dim=1).values[:, :neighbours].sum(dim=1)


def krum_select(x: torch.Tensor, f: int, m: int) -> list[int]:
    """Multi-Krum's choice: the ``m`` rows of lowest Krum score, ties to the lower row (m=1: Krum).

    Args:
        x: ``(n, D)``.
    Returns:
        the chosen row indices, in increasing score order.

    Examples:
        >>> krum_select(torch.tensor([[0.0], [1.0], [2.5], [4.0], [100.0]], dtype=torch.float64), f=1, m=2)
        [1, 2]
    """
    order = torch.sort(krum_scores(x, f), stable=True).indices
    return order[:min(m, x.shape[0])].tolist()


def bulyan_select(x: torch.Tensor, f: int) -> list[int]:
    """Bulyan's selection set (El Mhamdi et al. 2018, sec. 4): ``theta = n - 2f`` rows taken one at a
    time by Krum on the rows not taken yet (at least one).

    Args:
        x: ``(n, D)``.
    Returns:
        the rows taken, in the order Krum took them.
    """
    left, taken = list(range(x.shape[0])), []
    for _ in range(max(1, x.shape[0] - 2 * f)):
        best = left[krum_select(x[left], f, 1)[0]]
        taken.append(best)
        left.remove(best)
    return taken


def closest_to_median_mean(x: torch.Tensor, beta: int) -> torch.Tensor:
    """Bulyan's coordinate step: each coordinate's mean of the ``beta`` values closest to its median
    (ties to the lower row).

    Args:
        x: ``(theta, ...)``, the selection set.
    Returns:
        ``(...)``.
    """
    distance = (x - coordinate_median(x)).abs()
    nearest = torch.sort(distance, dim=0, stable=True).indices[:beta]
    return torch.gather(x, 0, nearest).mean(dim=0)
