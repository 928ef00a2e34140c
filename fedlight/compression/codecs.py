"""The math of compressing one tensor of a client's update, and what each encoding costs on the wire.

Each codec takes the update of one tensor as float64 (``x``, any shape, n entries) and returns what the
server reconstructs from the upload (``Sent.value``, float64, ``x``'s shape) with the bytes it sent, by
ledger dtype (``Sent.rows``). The bytes are those of a real encoding, packed to the bit:

* ``cast``: n entries of ``float16`` / ``bfloat16``.
* ``qsgd``: stochastic uniform quantization (Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD:
  Communication-Efficient SGD via Gradient Quantization and Encoding", NeurIPS 2017, sec. 3.1), with the
  max-norm scale of each block (the lower-variance variant of the paper's L2 scale, also unbiased): entry
  x_i of a block of scale M becomes sign(x_i) M l_i / s with s = 2^b - 1 levels and l_i = floor(|x_i| s / M)
  + Bernoulli(frac(|x_i| s / M)), so E[l_i] M / s = |x_i| and each entry's variance is at most (M / s)^2 /
  4. Sent: b bits of level and 1 sign bit an entry, packed (``uint8``), and one ``float32`` scale a block.
  As a contraction (error feedback's compressor), each block's reconstruction is divided by 1 + w, w =
  E||Q(x) - x||^2 / ||x||^2 = (M / s)^2 sum_i p_i (1 - p_i) / ||x||^2 (p_i = frac(|x_i| s / M)), which the
  client computes exactly. For an unbiased Q, E||Q(x) / (1 + w) - x||^2 = (1 - 1 / (1 + w)) ||x||^2: the
  delta-contraction error feedback's analysis assumes (Karimireddy et al. 2019, Assumption A; the same
  scaling that makes random-k's n / k estimate the contraction of Stich et al.), so the residual stays
  bounded. Without it 1-bit QSGD (w > 1 for a rotated Gaussian block) made the residual grow without bound.
  The divided scale is the one sent: no extra byte. With ``rotate``, each block is first multiplied by
  random signs and the normalised Walsh-Hadamard matrix (Suresh, Yu, Kumar, McMahan, "Distributed Mean
  Estimation with Limited Communication", ICML 2017, sec. 4), which spreads a block's mass over its entries
  and shrinks M; the server undoes it. A rotated block is a power of two long (``block``, or the tensor's
  next power of two where that is shorter): the tensor is padded with zeros, whose codes are sent (and
  counted) too. The signs come from the (client, round) generator the server also holds, so they cost
  nothing on the wire.
* ``top_k``: the k entries of largest magnitude: k values in the update's dtype and k indices of
  ceil(log2 n) bits each, packed (``uint8``).
* ``random_k``: k entries drawn uniformly without replacement from the (client, round) generator, which
  the server also holds: the indices cost nothing on the wire (Konecny et al., "Federated Learning:
  Strategies for Improving Communication Efficiency", 2016, sec. 3), the k values their dtype's bytes.
  Scaled by n / k the estimate is unbiased; unscaled it is the contraction error feedback needs.

torch has none of these encodings (its quantized tensors round to nearest, which is biased, and it has no
fast Walsh-Hadamard transform), so they are written here by hand on torch's tensor operations.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import torch

Rows = tuple[tuple[str, int], ...]
"""What a tensor's encoding sent: ``(ledger dtype, bytes)`` pairs (``uint8``: packed codes, signs or indices)."""

SCALE_DTYPE = torch.float32  # a quantization block's scale on the wire


class Sent(NamedTuple):
    """One tensor of an update as the server reconstructs it, and what the upload cost.

    Attributes:
        value: the reconstruction, float64, the input's shape.
        rows: the bytes sent, by ledger dtype.
    """

    value: torch.Tensor
    rows: Rows


def dtype_name(dtype: torch.dtype) -> str:
    """The ledger's name of a torch dtype (``float32``)."""
    return str(dtype).removeprefix("torch.")


def packed_bytes(entries: int, bits: int) -> int:
    """Bytes of ``entries`` codes of ``bits`` bits each, packed back to back."""
    return math.ceil(entries * bits / 8)


def index_bits(n: int) -> int:
    """Bits an index into n entries takes: ceil(log2 n) (0 for a single entry)."""
    return (n - 1).bit_length()


def kept(n: int, fraction: float) -> int:
    """k, the entries a sparsifier keeps of n: ceil(fraction n), at least 1, with ``fraction`` read as the
    decimal it was written as (in floats 0.07 x 100 is 7.000000000000001, whose ceiling is 8)."""
    return max(1, math.ceil(Fraction(repr(fraction)) * n))


def cast(x: torch.Tensor, dtype: torch.dtype) -> Sent:
    """``x`` sent as ``dtype`` (round to nearest)."""
    return Sent(x.to(dtype).double(), cast_rows(x.numel(), dtype))


def cast_rows(n: int, dtype: torch.dtype) -> Rows:
    """Bytes of n entries of ``dtype``."""
    return ((dtype_name(dtype), n * torch.empty(0, dtype=dtype).element_size()),)


def blocks(n: int, block: int | None, rotate: bool) -> tuple[int, int]:
    """(block length, number of blocks) of a tensor of n entries: one block of n (rotated: of the next power
    of two) where ``block`` is None, else blocks of ``block`` entries (a power of two when rotated; a tensor
    shorter than one rotated block is one block of its next power of two, not padded to ``block``)."""
    whole = 1 << index_bits(n) if rotate else n
    length = whole if block is None else (min(block, whole) if rotate else block)
    return length, math.ceil(n / length)


def qsgd_rows(n: int, bits: int, block: int | None, rotate: bool) -> Rows:
    """Bytes of ``qsgd``'s upload of n entries: b + 1 bits an entry sent (padding included) and a scale a block."""
    length, count = blocks(n, block, rotate)
    entries = length * count if rotate else n
    return (("uint8", packed_bytes(entries, bits + 1)),
            (dtype_name(SCALE_DTYPE), count * torch.empty(0, dtype=SCALE_DTYPE).element_size()))


def walsh_hadamard(x: torch.Tensor) -> torch.Tensor:
    """H x / sqrt(d) along the last dimension (d a power of two), H the Sylvester-ordered Walsh-Hadamard
    matrix (``scipy.linalg.hadamard``): orthonormal and its own inverse, in O(d log d) by butterflies."""
    d, lead = x.shape[-1], x.shape[:-1]
    y, h = x, 1
    while h < d:
        pairs = y.reshape(*lead, d // (2 * h), 2, h)
        y = torch.stack((pairs[..., 0, :] + pairs[..., 1, :], pairs[..., 0, :] - pairs[..., 1, :]), dim=-2)
        h *= 2
    return y.reshape(x.shape) / math.sqrt(d)


def stochastic_levels(y: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """floor(y) + Bernoulli(y - floor(y)) for y >= 0: an unbiased integer rounding of y."""
    low = y.floor()
    return low + (torch.rand(y.shape, generator=generator, dtype=y.dtype) < y - low)


def wire_scale(scale: torch.Tensor) -> torch.Tensor:
    """``scale`` as the float32 the server receives, rounded up so that no entry's level exceeds s."""
    sent = scale.to(SCALE_DTYPE)
    sent = torch.where(sent.double() < scale, torch.nextafter(sent, torch.tensor(math.inf, dtype=SCALE_DTYPE)), sent)
    return sent.double()


def qsgd(x: torch.Tensor, bits: int, block: int | None, rotate: bool, generator: torch.Generator,
         contract: bool = False) -> Sent:
    """``x`` stochastically quantized to 2^bits - 1 levels of each block's max-norm scale (module docstring),
    rotated first where ``rotate``; each block divided by 1 + w (a contraction) where ``contract``."""
    n, s = x.numel(), 2 ** bits - 1
    length, count = blocks(n, block, rotate)
    flat = torch.nn.functional.pad(x.reshape(-1), (0, length * count - n)).reshape(count, length)
    signs = None
    if rotate:
        signs = torch.randint(0, 2, flat.shape, generator=generator, dtype=flat.dtype) * 2 - 1
        flat = walsh_hadamard(flat * signs)
    scale = wire_scale(flat.abs().amax(dim=1, keepdim=True))
    ratio = torch.where(scale > 0, flat.abs() * s / scale.clamp_min(torch.finfo(flat.dtype).tiny), 0.0)
    if contract:  # the scale sent is M / (1 + w), w the block's exact relative variance (module docstring)
        p = ratio - ratio.floor()
        norm = (flat ** 2).sum(dim=1, keepdim=True)
        variance = (scale / s) ** 2 * (p * (1 - p)).sum(dim=1, keepdim=True)
        scale = (scale / (1 + torch.where(norm > 0, variance / norm.clamp_min(torch.finfo(flat.dtype).tiny), 0.0))
                 ).to(SCALE_DTYPE).double()
    out = flat.sign() * stochastic_levels(ratio, generator) * scale / s
    if rotate:
        out = walsh_hadamard(out) * signs
    return Sent(out.reshape(-1)[:n].reshape(x.shape), qsgd_rows(n, bits, block, rotate))


def top_k_rows(n: int, k: int, dtype: torch.dtype) -> Rows:
    """Bytes of ``top_k``'s upload: k values of ``dtype`` and k packed indices of ceil(log2 n) bits."""
    return (*cast_rows(k, dtype), ("uint8", packed_bytes(k, index_bits(n))))


def top_k(x: torch.Tensor, fraction: float, dtype: torch.dtype) -> Sent:
    """The k = ceil(fraction n) entries of ``x`` of largest magnitude (sent as ``dtype``), zeros elsewhere."""
    flat, k = x.reshape(-1), kept(x.numel(), fraction)
    index = flat.abs().topk(k, sorted=False).indices
    out = torch.zeros_like(flat)
    out[index] = flat[index].to(dtype).double()
    return Sent(out.reshape(x.shape), top_k_rows(x.numel(), k, dtype))


def random_k(x: torch.Tensor, fraction: float, dtype: torch.dtype, scaled: bool, generator: torch.Generator) -> Sent:
    """k = ceil(fraction n) entries of ``x`` drawn uniformly (sent as ``dtype``), times n / k where ``scaled``
    (unbiased), zeros elsewhere; the indices are the shared generator's (no bytes)."""
    flat, n = x.reshape(-1), x.numel()
    k = kept(n, fraction)
    index = torch.randperm(n, generator=generator)[:k]
    out = torch.zeros_like(flat)
    out[index] = flat[index].to(dtype).double() * (n / k if scaled else 1.0)
    return Sent(out.reshape(x.shape), cast_rows(k, dtype))
