"""Random views made in batches on the device, from uint8 images (SimCLR / BYOL style).

torchvision's v2 transforms draw one set of parameters per call, so augmenting a batch
sample by sample costs a Python loop per image. Here every parameter is drawn for the
whole batch at once (from a seeded CPU generator, so views are reproducible on any device)
and applied with batched tensor ops: resized crop + flip as one ``affine_grid`` /
``grid_sample``, colour jitter, grayscale, Gaussian blur as a grouped separable
convolution, solarisation.

Differences from torchvision, kept on purpose: jitter is applied in a fixed order
(brightness, contrast, saturation, hue) and hue is a rotation of the chroma plane in YIQ
space (exact for hue-only changes up to gamut clipping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class ViewParams:
    """Augmentation strengths; ``blur_p`` and ``solarize_p`` hold one probability per view."""

    crop_min_scale: float = 0.2
    flip_p: float = 0.5
    jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    grayscale_p: float = 0.2
    blur_p: tuple[float, ...] = (0.0, 0.0)
    solarize_p: tuple[float, ...] = (0.0, 0.0)


def _uniform(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=g) * (high - low) + low


def _bernoulli(n: int, p: float, g: torch.Generator) -> torch.Tensor:
    return torch.rand(n, generator=g) < p


def _gray(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) -> (B, 1, H, W) luma (ITU-R 601, as torchvision)."""
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


class ViewMaker:
    """Turns a uint8 batch into normalised float views.

    Args:
        params: augmentation strengths.
        mean: (C,) per-channel mean of the training images in [0, 1].
        std: (C,) per-channel std.
        channels_last: return NHWC-strided views (same values), for a channels-last model.
    """

    def __init__(self, params: ViewParams, mean: torch.Tensor, std: torch.Tensor, channels_last: bool = False) -> None:
        self.p = params
        self.mean = mean.view(1, -1, 1, 1)
        self.std = std.view(1, -1, 1, 1)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) uint8 -> normalised float, no augmentation (for evaluation)."""
        return self._standardize(x.float().div_(255))

    def _standardize(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) in [0, 1] -> (x - mean) / std in the model's memory format."""
        x = (x - self.mean.to(x.device)) / self.std.to(x.device)
        return x.contiguous(memory_format=self.memory_format) if x.dim() == 4 else x

    def views(self, x: torch.Tensor, n: int, g: torch.Generator) -> list[torch.Tensor]:
        """``n`` independently augmented, normalised views of uint8 batch ``x`` (B, C, H, W)."""
        return [self.view(x, i, g) for i in range(n)]

    def view(self, x: torch.Tensor, index: int, g: torch.Generator) -> torch.Tensor:
        """One augmented view; ``index`` selects the per-view blur / solarise probability."""
        b, c = x.shape[:2]
        out = self._crop_flip(x.float().div_(255), g)
        if c == 3:
            out = self._jitter_rgb(out, g)
            gray = _bernoulli(b, self.p.grayscale_p, g).to(out.device).view(-1, 1, 1, 1)
            out = torch.where(gray, _gray(out).expand_as(out), out)
        else:
            out = self._jitter_gray(out, g)
        blur_p = self.p.blur_p[index % len(self.p.blur_p)]
        if blur_p > 0:
            out = self._blur(out, blur_p, g)
        solarize_p = self.p.solarize_p[index % len(self.p.solarize_p)]
        if solarize_p > 0:
            sol = _bernoulli(b, solarize_p, g).to(out.device).view(-1, 1, 1, 1)
            out = torch.where(sol & (out >= 0.5), 1.0 - out, out)
        return self._standardize(out)

    def _crop_flip(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """Random resized crop (scale in [crop_min_scale, 1], ratio in [3/4, 4/3]) + horizontal flip."""
        b = x.shape[0]
        area = _uniform(b, self.p.crop_min_scale, 1.0, g)
        log_ratio = _uniform(b, math.log(3 / 4), math.log(4 / 3), g)
        w = (area * log_ratio.exp()).sqrt().clamp(max=1.0)
        h = (area / log_ratio.exp()).sqrt().clamp(max=1.0)
        cx = (_uniform(b, -1.0, 1.0, g) * (1 - w))
        cy = (_uniform(b, -1.0, 1.0, g) * (1 - h))
        flip = torch.where(_bernoulli(b, self.p.flip_p, g), -1.0, 1.0)
        theta = torch.zeros(b, 2, 3)
        theta[:, 0, 0], theta[:, 0, 2] = w * flip, cx
        theta[:, 1, 1], theta[:, 1, 2] = h, cy
        grid = F.affine_grid(theta.to(x.device), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)

    def _factors(self, b: int, strength: float, apply: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        f = _uniform(b, max(0.0, 1 - strength), 1 + strength, g)
        return torch.where(apply, f, torch.ones_like(f)).view(-1, 1, 1, 1)

    def _jitter_gray(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        b = x.shape[0]
        apply = _bernoulli(b, self.p.jitter_p, g)
        bright = self._factors(b, self.p.brightness, apply, g).to(x.device)
        contrast = self._factors(b, self.p.contrast, apply, g).to(x.device)
        x = (x * bright).clamp(0, 1)
        m = x.mean(dim=(1, 2, 3), keepdim=True)
        return ((x - m) * contrast + m).clamp(0, 1)

    def _jitter_rgb(self, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        b = x.shape[0]
        apply = _bernoulli(b, self.p.jitter_p, g)
        bright = self._factors(b, self.p.brightness, apply, g).to(x.device)
        contrast = self._factors(b, self.p.contrast, apply, g).to(x.device)
        sat = self._factors(b, self.p.saturation, apply, g).to(x.device)
        hue = torch.where(apply, _uniform(b, -self.p.hue, self.p.hue, g), torch.zeros(b)).to(x.device)
        x = (x * bright).clamp(0, 1)
        m = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
        x = ((x - m) * contrast + m).clamp(0, 1)
        gray = _gray(x)
        x = ((x - gray) * sat + gray).clamp(0, 1)
        return self._rotate_hue(x, hue)

    @staticmethod
    def _rotate_hue(x: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
        """Shift hue by ``hue`` turns (B,) by rotating the I/Q chroma plane of YIQ."""
        to_yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]],
                              device=x.device)
        angle = hue * 2 * math.pi
        cos, sin = angle.cos(), angle.sin()
        rot = torch.zeros(len(hue), 3, 3, device=x.device)
        rot[:, 0, 0] = 1
        rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = cos, -sin, sin, cos
        m = torch.linalg.inv(to_yiq) @ rot @ to_yiq  # (B, 3, 3)
        return torch.einsum("bij,bjhw->bihw", m, x).clamp(0, 1)

    def _blur(self, x: torch.Tensor, p: float, g: torch.Generator) -> torch.Tensor:
        """Gaussian blur, sigma in [0.1, 2] as SimCLR; the kernel is ~10% of the side (odd, >= 3)."""
        b, c, h, w = x.shape
        size = max(3, int(0.1 * h) | 1)
        sigma = _uniform(b, 0.1, 2.0, g)
        apply = _bernoulli(b, p, g)
        sigma = torch.where(apply, sigma, torch.full_like(sigma, 1e-3))
        r = torch.arange(size, dtype=torch.float32) - size // 2
        k = torch.exp(-(r.view(1, -1) ** 2) / (2 * sigma.view(-1, 1) ** 2))
        k = (k / k.sum(dim=1, keepdim=True)).to(x.device)  # (B, size)
        k = k.repeat_interleave(c, dim=0)  # (B*C, size)
        flat = x.reshape(1, b * c, h, w)
        pad = size // 2
        flat = F.conv2d(F.pad(flat, (pad, pad, 0, 0), mode="reflect"), k.view(b * c, 1, 1, size), groups=b * c)
        flat = F.conv2d(F.pad(flat, (0, 0, pad, pad), mode="reflect"), k.view(b * c, 1, size, 1), groups=b * c)
        return flat.view(b, c, h, w)
