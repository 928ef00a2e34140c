"""CF-CL's smart push (Algorithm 1, lines 3-5): each device's most representative points.

Device i runs K-means++ with K = K_reserve on its own data and pushes, to every neighbour,
the datapoint nearest to each centroid (the reserve D^Reserve_{i->j}, eq. 6). It runs once,
before training, on the raw pixels (the model is untrained then).
"""

from __future__ import annotations

import numpy as np


def reserve_points(points: np.ndarray, k: int, seed: int, max_iter: int = 100) -> np.ndarray:
    """Positions (into ``points``) of the point nearest each of ``k`` K-means++ centroids.

    The nearest point is taken among the centroid's own cluster, so the ``k`` positions are
    distinct (a K-means cluster is never empty).

    Args:
        points: (N, D) float features (flattened pixels).
        k: K_reserve; all N points are returned when N <= k.
        seed: K-means++ seeding.
        max_iter: Lloyd iterations.
    Returns:
        (min(k, N),) int64 positions, sorted by cluster id.
    """
    from sklearn.cluster import KMeans  # here, not at the top: only CF-CL runs pay sklearn's 0.18 s import

    if len(points) <= k:
        return np.arange(len(points))
    km = KMeans(n_clusters=k, init="k-means++", n_init=1, max_iter=max_iter, random_state=seed % 2**32).fit(points)
    out = np.empty(k, dtype=np.int64)
    for c in range(k):
        members = np.flatnonzero(km.labels_ == c)
        dist = ((points[members] - km.cluster_centers_[c]) ** 2).sum(1)
        out[c] = members[np.argmin(dist)]
    return out
