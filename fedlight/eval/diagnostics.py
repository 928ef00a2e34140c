"""Label-free readings of an embedding: is the encoder collapsing, fully or dimensionally?

- RankMe (Garrido et al., "RankMe: assessing the downstream performance of pretrained self-supervised
  representations by their rank", ICML 2023): the exponential of the entropy of the normalised singular
  values of the (N, D) embedding matrix; 1 for a rank-1 embedding, about D for an isotropic one.
- The normalised singular-value spectrum itself (what RankMe summarises).
- Alignment and uniformity (Wang and Isola, "Understanding contrastive representation learning through
  alignment and uniformity on the hypersphere", ICML 2020), on the unit-length embeddings of two views.
- The per-dimension standard deviation of the unit-length embeddings (Chen and He, "Exploring simple
  Siamese representation learning", CVPR 2021, section 4.1): 0 for a collapsed encoder, about 1/sqrt(D)
  for an isotropic Gaussian one (``lightly.utils.debug.std_of_l2_normalized``).
- Linear CKA (Kornblith et al., "Similarity of neural network representations revisited", ICML 2019)
  between two encoders' embeddings of the same images, with the unbiased HSIC estimator (Song et al. 2012;
  Nguyen et al. 2021), whose scale does not depend on how many images there are against dimensions.

None of these needs a label. The first three take the features an evaluation computed anyway.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightly.utils.debug import std_of_l2_normalized

EPS = 1e-7  # RankMe's epsilon (Garrido et al., eq. 1): keeps log p finite for a zero singular value


def normalized_spectrum(features: torch.Tensor) -> torch.Tensor:
    """The singular values of ``features`` (N, D), divided by their sum: (min(N, D),), descending."""
    sigma = torch.linalg.svdvals(features.double())
    return sigma / sigma.sum().clamp_min(EPS)


def rankme(spectrum: torch.Tensor) -> float:
    """RankMe of a ``normalized_spectrum`` (k,): exp(-sum_k p_k log p_k), p_k = sigma_k / ||sigma||_1 + eps."""
    p = spectrum + EPS
    return float(torch.exp(-(p * p.log()).sum()))


def embedding_std(features: torch.Tensor) -> float:
    """The mean over dimensions of the std of the unit-length ``features`` (N, D) (SimSiam's collapse reading)."""
    return float(std_of_l2_normalized(features.float()))


def alignment(z1: torch.Tensor, z2: torch.Tensor, alpha: float = 2.0) -> float:
    """Wang and Isola's alignment: E ||f(x) - f(y)||^alpha over positive pairs, on unit-length (B, D)
    ``z1`` and ``z2`` (row i of each: two views of one image); 0 when the views coincide, at most 2^alpha.

    By hand: lightly's ``HypersphereLoss`` returns alignment plus uniformity as one number.
    """
    return float((F.normalize(z1.float(), dim=1) - F.normalize(z2.float(), dim=1)).norm(dim=1).pow(alpha).mean())


def uniformity(z: torch.Tensor, t: float = 2.0) -> float:
    """Wang and Isola's uniformity: log E exp(-t ||f(x) - f(y)||^2) over distinct pairs of the unit-length
    (B, D) ``z``; 0 for a collapsed embedding, more negative the more uniform on the sphere."""
    distances = torch.pdist(F.normalize(z.double(), dim=1), p=2)
    return float(distances.pow(2).mul(-t).exp().mean().log())


def linear_cka(x: torch.Tensor, y: torch.Tensor) -> float:
    """Debiased linear CKA of two encoders' embeddings (N, D1) and (N, D2) of the same N >= 4 images:
    HSIC_u(K, L) / sqrt(HSIC_u(K, K) HSIC_u(L, L)), K = X'X'^T and L = Y'Y'^T of the centred embeddings,
    HSIC_u the unbiased estimator of Song et al. ("Feature selection via dependence maximization", JMLR
    2012), as Nguyen, Raghu and Kornblith use for minibatch CKA ("Do wide and deep networks learn the same
    things?", ICLR 2021). 1 for embeddings equal up to rotation and scale, about 0 for unrelated ones, at any
    N. Kornblith et al.'s plain estimator (ICML 2019, eq. 5) is biased upward where N is not much larger
    than D: two independent Gaussian embeddings read 0.50 at N = D = 128 and 0.80 at N = 128, D = 512, so
    its scale's low end was not 0 (where two encoders are much alike, 0.56 to 0.99 in docs/reading-a-run.md's
    runs, the two estimators differed by under 0.01).

    By hand: no kept library (lightly, torchmetrics, scikit-learn) has it."""
    x, y = x.double() - x.double().mean(0), y.double() - y.double().mean(0)
    k, l = x @ x.T, y @ y.T
    xy, xx, yy = _unbiased_hsic(k, l), _unbiased_hsic(k, k), _unbiased_hsic(l, l)
    return float(xy / (xx * yy).clamp_min(EPS ** 2).sqrt())


def _unbiased_hsic(k: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Song et al.'s unbiased HSIC of two symmetric (N, N) Gram matrices: with K~, L~ their diagonals zeroed,
    (tr(K~ L~) + 1^T K~ 1 1^T L~ 1 / ((N - 1)(N - 2)) - 2 / (N - 2) 1^T K~ L~ 1) / (N (N - 3))."""
    n = k.shape[0]
    k, l = k - torch.diag(torch.diag(k)), l - torch.diag(torch.diag(l))
    ones_k, ones_l = k.sum(0), l.sum(0)  # 1^T K, 1^T L
    trace = (k * l).sum()
    return (trace + k.sum() * l.sum() / ((n - 1) * (n - 2)) - 2 * (ones_k @ ones_l) / (n - 2)) / (n * (n - 3))
