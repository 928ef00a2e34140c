"""CF-CL's smart pull (Algorithm 2, eq. 8-12): which of its points transmitter j sends to receiver i.

Transmitter j embeds the receiver's reserve (pushed by i) and its own approximation set with
the latest global model and clusters both together with K-means++ (4 clusters). Then

    macro (eq. 8-9):  P(l) prop. to X(l) = n_approx(l) / (n_approx(l) + n_reserve(l)),
    micro (eq. 10-11): P(d^ | l) = softmax over cluster l of lambda_t * E_{d in reserve}[L(d, F(d), d^)],
    pull (eq. 12):    P(d^) = P(d^ | l) P(l),

so j favours clusters the receiver lacks and, within them, points that the receiver's data
would treat as hard negatives. The selection temperature rises as lambda_t = 6 t/T + 4.
Nothing here sees a label.
"""

from __future__ import annotations

import numpy as np


def selection_temperature(t: int, total: int) -> float:
    """lambda_t = 6 t / T + 4 (Sec. IV)."""
    return 6.0 * t / total + 4.0


def cluster_embeddings(reserve: np.ndarray, approx: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """K-means++ on reserve u approx embeddings (Algorithm 2, line 4).

    Args:
        reserve: (R, d) embeddings of the receiver's reserve points.
        approx: (A, d) embeddings of the transmitter's approximation set.
        k: number of clusters |L| (4 in the paper).
        seed: K-means++ seeding.
    Returns:
        cluster ids of the reserve (R,) and of the approximation set (A,).
    """
    from sklearn.cluster import KMeans  # here, not at the top: only CF-CL runs pay sklearn's 0.18 s import

    both = np.concatenate([reserve, approx]).astype(np.float64)
    k = min(k, len(both))
    labels = KMeans(n_clusters=k, init="k-means++", n_init=1, random_state=seed % 2**32).fit_predict(both)
    return labels[:len(reserve)], labels[len(reserve):]


def macro_probabilities(reserve_clusters: np.ndarray, approx_clusters: np.ndarray, k: int) -> np.ndarray:
    """Eq. 8-9: the probability of sampling each of the ``k`` clusters, shape (k,).

    A cluster without approximation points gets probability 0 (there is nothing to send).
    """
    n_approx = np.bincount(approx_clusters, minlength=k).astype(np.float64)
    n_reserve = np.bincount(reserve_clusters, minlength=k).astype(np.float64)
    x = np.divide(n_approx, n_approx + n_reserve, out=np.zeros(k), where=n_approx > 0)
    return x / x.sum()


def micro_probabilities(expected_loss: np.ndarray, approx_clusters: np.ndarray, temperature: float) -> np.ndarray:
    """Eq. 11: softmax of ``temperature`` x expected loss within each cluster, shape (A,).

    Each cluster's entries sum to one.
    """
    out = np.zeros(len(expected_loss))
    for c in np.unique(approx_clusters):
        members = approx_clusters == c
        z = temperature * expected_loss[members]
        e = np.exp(z - z.max())
        out[members] = e / e.sum()
    return out


def pull_probabilities(macro: np.ndarray, micro: np.ndarray, approx_clusters: np.ndarray) -> np.ndarray:
    """Eq. 12: P(d^) = P_micro(d^) x P_macro(cluster of d^), shape (A,); sums to one."""
    return micro * macro[approx_clusters]


def sample_pull(probabilities: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of ``n`` distinct points drawn with ``probabilities`` (Algorithm 2, line 9).

    When fewer than ``n`` points have non-zero probability, only those are sent.
    """
    n = min(n, int((probabilities > 0).sum()))
    return np.sort(rng.choice(len(probabilities), size=n, replace=False, p=probabilities / probabilities.sum()))
