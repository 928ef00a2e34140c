"""Feature shift: clients whose images look different (FedBN's setting, Li et al., ICLR 2021).

Each domain is one fixed image transform whose parameters are drawn once from the run seed;
every training image of the domain's clients, and the domain's share of the test split, is
transformed once, before any SSL view is made from it. The clients are cut into contiguous
groups, one a domain, and within a domain any label partition (``partition.kind``) splits the
domain's images over its clients, so ``partition.kind=dirichlet`` with
``partition.domains=[identity, rotate, blur]`` is Dirichlet label skew within each of three domains.

The transforms are torchvision's ``transforms.v2.functional`` ops on uint8 (N, C, H, W)
batches; the stated ranges below are where each domain's parameters are drawn from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch
from torchvision.transforms.v2 import functional as F

from fedlight.data.image_data import ImageData
from fedlight.data.partition import proportional_sizes
from fedlight.errors import UserError
from fedlight.seeding import numpy_rng

Transform = Callable[[torch.Tensor], torch.Tensor]

# the parts a "style" domain composes two or three of (colour needs RGB, so it is not among them)
STYLE_PARTS = ("rotate", "contrast", "blur", "noise", "invert")


def _rotate(rng: np.random.Generator) -> Transform:
    """A quarter, half or three-quarter turn (multiples of 90 degrees lose no pixel)."""
    degrees = float(rng.choice([90, 180, 270]))
    return lambda x: F.rotate(x, degrees)


def _contrast(rng: np.random.Generator) -> Transform:
    """Contrast x U(0.3, 0.6), then brightness x U(1.2, 1.6): a washed-out, over-exposed camera."""
    contrast, brightness = rng.uniform(0.3, 0.6), rng.uniform(1.2, 1.6)
    return lambda x: F.adjust_brightness(F.adjust_contrast(x, contrast), brightness)


def _blur(rng: np.random.Generator) -> Transform:
    """Gaussian blur, 5 x 5 kernel, sigma ~ U(1, 2): an out-of-focus lens."""
    sigma = rng.uniform(1.0, 2.0)
    return lambda x: F.gaussian_blur(x, [5, 5], [sigma, sigma])


def _noise(rng: np.random.Generator) -> Transform:
    """Additive Gaussian pixel noise of std ~ U(0.1, 0.2) (in [0, 1] units), one draw per image
    from the domain's own generator: a noisy sensor. The generator runs on from call to call, so
    the training images, the test images and any set drawn later each get fields of their own (a
    generator reseeded every call gave test image k the noise of training image k)."""
    std, generator = rng.uniform(0.1, 0.2), torch.Generator().manual_seed(int(rng.integers(2**62)))

    def apply(x: torch.Tensor) -> torch.Tensor:
        noise = torch.randn(x.shape, generator=generator)
        return (x.float() / 255 + std * noise).clamp(0, 1).mul(255).round().to(torch.uint8)

    return apply


def _invert(rng: np.random.Generator) -> Transform:
    """Every pixel value v -> 255 - v (a negative)."""
    return F.invert


def _colour_refusal(channels: int) -> UserError:
    return UserError(f"partition.domains: colour shifts the hue of RGB images, but these have {channels} "
                     "channel(s); use invert or style instead")


def _colour(rng: np.random.Generator) -> Transform:
    """A hue shift of U(0.25, 0.5) of the colour wheel (RGB images only)."""
    hue = rng.uniform(0.25, 0.5) * rng.choice([-1, 1])

    def apply(x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != 3:
            raise _colour_refusal(x.shape[1])
        return F.adjust_hue(x, float(hue))

    return apply


def _style(rng: np.random.Generator) -> Transform:
    """Two or three of ``STYLE_PARTS``, drawn without replacement, applied in the drawn order."""
    names = rng.choice(STYLE_PARTS, size=int(rng.integers(2, 4)), replace=False)
    parts = [TRANSFORMS[str(name)](rng) for name in names]

    def apply(x: torch.Tensor) -> torch.Tensor:
        for part in parts:
            x = part(x)
        return x

    return apply


# partition.domains' names -> a builder drawing that transform's parameters from a generator
TRANSFORMS: dict[str, Callable[[np.random.Generator], Transform]] = {
    "identity": lambda rng: (lambda x: x), "rotate": _rotate, "contrast": _contrast, "blur": _blur,
    "noise": _noise, "invert": _invert, "colour": _colour, "style": _style}


def domain_transforms(names: list[str], rng: np.random.Generator) -> list[Transform]:
    """One transform a domain, each drawing its parameters from ``rng`` in domain order."""
    return [TRANSFORMS[name](rng) for name in names]


def domain_clients(domains: int, num_clients: int) -> list[np.ndarray]:
    """The clients of each domain: ``num_clients`` cut into ``domains`` contiguous groups as even as can be
    (the first groups one larger where they do not divide)."""
    return np.array_split(np.arange(num_clients), domains)


def check_domain_clients(names: list[str], num_clients: int, public_client: int | None = None) -> None:
    """Every domain needs a client that trains: at least one client a domain, and no domain whose only
    client is the public one (it would be scored on and trained on by no one).

    Raises:
        UserError: naming ``clients.num`` or the domain, in one line.
    """
    if num_clients < len(names):
        raise UserError(f"partition.domains lists {len(names)} domains but clients.num={num_clients}; every domain "
                        "needs a client: raise clients.num or list fewer domains")
    for name, clients in zip(names, domain_clients(len(names), num_clients)):
        if public_client is not None and clients.tolist() == [public_client]:
            raise UserError(f"partition.domains: domain '{name}' holds only the public client (partition.public_client="
                            f"{public_client}), so no client trains on it; raise clients.num or list fewer domains")


def check_domain_images(names: list[str], channels: int, image_size: int) -> None:
    """The transforms are for images of 1 or 3 channels and at least blur's 5 x 5 pixels (not rows of
    features such as a tabular dataset's); ``colour`` needs 3.

    Raises:
        UserError: naming ``partition.domains``, in one line.
    """
    if channels not in (1, 3) or image_size < 5:
        raise UserError(f"partition.domains transforms images of 1 or 3 channels and 5 x 5 pixels or more, but these "
                        f"samples are {channels} x {image_size} x {image_size}; drop partition.domains for this data")
    if "colour" in names and channels != 3:
        raise _colour_refusal(channels)


@dataclass
class ShiftedData:
    """A feature-shifted federation.

    Attributes:
        data: images with every domain's transform applied; ``train_domain`` (N,) and
            ``test_domain`` (M,) say which domain each image belongs to.
        parts: every client's indices into ``data.train_x``.
        client_domain: (K,) the domain of each client.
        transforms: each domain's transform, in domain order (for images drawn later, such as a
            balanced public set that stands in for a client's share).
    """

    data: ImageData
    parts: list[np.ndarray]
    client_domain: np.ndarray
    transforms: list[Transform]

    def client_transform(self, client: int) -> Transform:
        """The transform of ``client``'s domain."""
        return self.transforms[int(self.client_domain[client])]


def _cut(count: int, sizes: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """A seeded permutation of ``range(count)`` cut into pieces of ``sizes``, each sorted."""
    return [np.sort(piece) for piece in np.split(rng.permutation(count), np.cumsum(sizes)[:-1])]


def shift_features(data: ImageData, names: list[str], num_clients: int, rng: np.random.Generator,
                   split: Callable[[np.ndarray, int], list[np.ndarray]]) -> ShiftedData:
    """Split the training and test images into domains, transform each, and partition within each.

    Args:
        data: the federation's images.
        names: ``partition.domains``, one transform name a domain (D of them).
        num_clients: K >= D; the clients are cut into D contiguous groups as even as can be.
        rng: seeded generator: the domains' parameters, then the train and test splits.
        split: the label partition, ``(a domain's indices into the training set, its clients) ->
            index arrays`` into those indices.

    Returns:
        The shifted data, every client's indices, and each client's domain.

    Raises:
        UserError: fewer clients than domains, or samples the transforms cannot take.
    """
    d = len(names)
    check_domain_clients(names, num_clients)
    check_domain_images(names, data.channels, data.image_size)
    transforms = domain_transforms(names, rng)
    clients_per_domain = np.array([len(g) for g in domain_clients(d, num_clients)])
    train = _cut(len(data.train_y), proportional_sizes(len(data.train_y), clients_per_domain.astype(float)), rng)
    test = _cut(len(data.test_y), proportional_sizes(len(data.test_y), np.ones(d)), rng)
    parts: list[np.ndarray] = []
    for idx, clients in zip(train, clients_per_domain):
        parts.extend(idx[local] for local in split(idx, int(clients)))
    shifted = replace(data, train_x=_apply(data.train_x, train, transforms), test_x=_apply(data.test_x, test, transforms),
                      train_domain=_domain_ids(train, len(data.train_y)), test_domain=_domain_ids(test, len(data.test_y)),
                      domain_names=tuple(names))
    return ShiftedData(shifted, parts, np.repeat(np.arange(d), clients_per_domain), transforms)


def shift_like_run(data: ImageData, names: list[str], num_clients: int, seed: int) -> ImageData:
    """The images a run with ``partition.domains=names`` trained and was evaluated on, for a reader of the
    finished run (``fedlight.probe_encoder``, ``fedlight export``): ``prepare_data``'s shift, without the label
    partition within the domains, which no image depends on. ``names`` empty: ``data`` itself."""
    if not names:
        return data
    keep_whole = lambda idx, clients: np.array_split(np.arange(len(idx)), clients)  # noqa: E731 (images only)
    return shift_features(data, names, num_clients, numpy_rng(seed, "domains"), keep_whole).data


def _apply(images: torch.Tensor, pieces: list[np.ndarray], transforms: list[Transform]) -> torch.Tensor:
    """``images`` with each piece's images replaced by its domain's transform of them."""
    out = images.clone()
    for idx, transform in zip(pieces, transforms):
        if len(idx):
            index = torch.as_tensor(idx)
            out[index] = transform(images[index])
    return out


def _domain_ids(pieces: list[np.ndarray], count: int) -> torch.Tensor:
    """(count,) int64: the piece each index lies in."""
    ids = torch.zeros(count, dtype=torch.long)
    for domain, idx in enumerate(pieces):
        ids[torch.as_tensor(idx, dtype=torch.long)] = domain
    return ids
