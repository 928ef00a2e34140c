"""Random views made in batches, from uint8 images (SimCLR / BYOL style).

torchvision's v2 transforms draw one set of parameters per call, so augmenting a batch
sample by sample costs a Python loop per image. Here every parameter is drawn for the
whole batch at once and applied with batched tensor ops: resized crop + flip as one
``affine_grid`` / ``grid_sample``, colour jitter, grayscale, Gaussian blur as a grouped
separable convolution, solarisation.

Where the parameters are drawn (``views.on_device``):

* on the CPU (the default off CUDA): view by view from the seeded CPU generator the loop passes
  in, so views are the same on any device; each view copies its parameters to the images' device;
* on the images' device: one ``torch.rand`` call on a device generator draws every parameter of
  every view of the batch, and the views are made as one batch of ``views x B`` images, with
  no copy from the host. The device generator is seeded from the loop's CPU generator, so views
  are the same for the same seed on the same device type (CUDA's Philox stream is not the CPU's).
  On a GPU this removes the per-view launches and copies that cost 4.1 ms a step of ResNet-18
  SimCLR at batch 256 on an H200 (BENCHMARKS.md section 5).

Both ways turn the same uniform draws into parameters with the same code (``ViewMaker._derive``),
so the distributions are the same; only the random numbers differ.

Differences from torchvision, kept on purpose: jitter is applied in a fixed order
(brightness, contrast, saturation, hue) and hue is a rotation of the chroma plane in YIQ
space (exact for hue-only changes up to gamut clipping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

# the uniform draws a view takes, each (B,) in [0, 1), in the order the CPU way draws them
CROP_FLIP = ("area", "log_ratio", "cx", "cy", "flip")
JITTER_GRAY = ("jitter", "bright", "contrast")
JITTER_RGB = (*JITTER_GRAY, "saturation", "hue", "grayscale")
BLUR = ("sigma", "blur")
SOLARIZE = ("solarize",)
# ITU-R 601 RGB -> YIQ (hue rotation)
TO_YIQ = ((0.299, 0.587, 0.114), (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))


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


@dataclass
class ViewDraw:
    """One batch of views' parameters, M = views x B rows (None: the step is not drawn).

    Attributes:
        theta: (M, 2, 3) affine crop + flip.
        bright, contrast: (M, 1, 1, 1) jitter factors (1 where jitter is not applied).
        saturation: (M, 1, 1, 1) jitter factor (RGB only).
        hue: (M,) hue shift in turns (RGB only).
        grayscale: (M, 1, 1, 1) bool (RGB only).
        kernel: (M, k) normalised 1-D Gaussian blur kernels (sigma 1e-3, the identity, where not blurred).
        solarize: (M, 1, 1, 1) bool.
    """

    theta: torch.Tensor
    bright: torch.Tensor
    contrast: torch.Tensor
    saturation: torch.Tensor | None = None
    hue: torch.Tensor | None = None
    grayscale: torch.Tensor | None = None
    kernel: torch.Tensor | None = None
    solarize: torch.Tensor | None = None

    def to(self, device: torch.device) -> ViewDraw:
        """The same parameters on ``device``."""
        return ViewDraw(**{f.name: None if (t := getattr(self, f.name)) is None else t.to(device)
                           for f in fields(self)})


Probability = float | torch.Tensor
"""A probability for every row (a float) or one per row ((M,) tensor: per-view probabilities)."""


def _uniform(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Uniform draws ``u`` in [0, 1) mapped to [low, high)."""
    return u * (high - low) + low


def _gray(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) -> (B, 1, H, W) luma (ITU-R 601, as torchvision)."""
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


def blur_size(height: int) -> int:
    """The blur kernel's size: ~10% of the side, odd, at least 3."""
    return max(3, int(0.1 * height) | 1)


def views_on_device(setting: bool | None, device: torch.device) -> bool:
    """``views.on_device`` resolved: None (the default) draws on the device where it is CUDA."""
    return device.type == "cuda" if setting is None else setting


class ViewMaker:
    """Turns a uint8 batch into normalised float views.

    Args:
        params: augmentation strengths.
        mean: (C,) per-channel mean of the training images in [0, 1].
        std: (C,) per-channel std.
        channels_last: return NHWC-strided views (same values), for a channels-last model.
        on_device: draw the parameters on the images' device, every view in one call (module
            docstring); False: view by view on the CPU generator.
    """

    def __init__(self, params: ViewParams, mean: torch.Tensor, std: torch.Tensor, channels_last: bool = False,
                 on_device: bool = False) -> None:
        self.params = params
        self.mean = mean.view(1, -1, 1, 1)
        self.std = std.view(1, -1, 1, 1)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.on_device = on_device
        self._constants: dict[tuple, torch.Tensor] = {}  # small tensors, once per device

    def _constant(self, name: str, device: torch.device, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``make()`` on ``device``, made once per device (no host-to-device copy per call)."""
        key = (name, device)
        if key not in self._constants:  # worker threads may both make it: the same values
            self._constants[key] = make().to(device)
        return self._constants[key]

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) uint8 -> normalised float, no augmentation (for evaluation)."""
        return self._standardize(x.float().div_(255))

    def _standardize(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) in [0, 1] -> (x - mean) / std in the model's memory format."""
        mean = self._constant("mean", x.device, lambda: self.mean)
        std = self._constant("std", x.device, lambda: self.std)
        x = (x - mean) / std
        return x.contiguous(memory_format=self.memory_format) if x.dim() == 4 else x

    def views(self, x: torch.Tensor, n: int, g: torch.Generator) -> list[torch.Tensor]:
        """``n`` independently augmented, normalised views of uint8 batch ``x`` (B, C, H, W)."""
        if self.on_device:
            return self._batched_views(x, range(n), g)
        return [self.view(x, i, g) for i in range(n)]

    def view(self, x: torch.Tensor, index: int, g: torch.Generator) -> torch.Tensor:
        """One augmented view; ``index`` selects the per-view blur / solarise probability."""
        if self.on_device:
            return self._batched_views(x, [index], g)[0]
        return self._apply(x.float().div_(255), self.draw_on_cpu(x.shape, index, g).to(x.device))

    def draw_on_cpu(self, shape: torch.Size, index: int, g: torch.Generator) -> ViewDraw:
        """View ``index``'s parameters for a batch of ``shape`` (B, C, H, W), drawn view by view from
        the CPU generator ``g`` (one ``torch.rand(B)`` per parameter), on the CPU."""
        return self._derive(self._uniforms_on_cpu(shape, index, g), shape[2],
                            self._probability(self.params.blur_p, index),
                            self._probability(self.params.solarize_p, index))

    def _uniforms_on_cpu(self, shape: torch.Size, index: int, g: torch.Generator) -> dict[str, torch.Tensor]:
        """``draw_on_cpu``'s uniform draws, name -> (B,), before ``_derive`` turns them into parameters."""
        b, c = shape[:2]
        blur = self._probability(self.params.blur_p, index) > 0
        solarize = self._probability(self.params.solarize_p, index) > 0
        return {name: torch.rand(b, generator=g) for name in self._draws(c, blur, solarize)}

    def draw_on_device(self, shape: torch.Size, indices: Sequence[int], g: torch.Generator,
                       device: torch.device) -> ViewDraw:
        """The parameters of views ``indices`` for a batch of ``shape`` (B, C, H, W), all in one
        ``torch.rand`` call on ``device``'s generator seeded from ``g``: (views x B) rows, view by view."""
        return self._derive(*self._uniforms_on_device(shape, indices, g, device))

    def _uniforms_on_device(self, shape: torch.Size, indices: Sequence[int], g: torch.Generator, device: torch.device
                            ) -> tuple[dict[str, torch.Tensor], int, Probability, Probability]:
        """``draw_on_device``'s uniform draws (name -> (views x B,)), the height, and the per-row blur and
        solarise probabilities: what ``_derive`` turns into the parameters."""
        b, c, h = shape[:3]
        blur_p = [self._probability(self.params.blur_p, i) for i in indices]
        solarize_p = [self._probability(self.params.solarize_p, i) for i in indices]
        names = self._draws(c, max(blur_p) > 0, max(solarize_p) > 0)
        rows = torch.rand(len(names), len(indices) * b, generator=self._device_generator(g, device), device=device)
        return dict(zip(names, rows)), h, self._per_row(blur_p, b, device), self._per_row(solarize_p, b, device)

    def views_of_many(self, xs: Sequence[torch.Tensor], n: int, gs: Sequence[torch.Generator]
                      ) -> list[list[torch.Tensor]]:
        """``[self.views(x, n, g) for x, g in zip(xs, gs)]``, each batch's parameters drawn from its own
        generator exactly as ``views`` draws them, but turned into parameters and applied once for all
        the batches (batches of different sizes allowed; one image's view reads only that image and its
        own parameters, so the views are the same): one call per view on the CPU way, one call in all
        on the device way, in place of one per view and batch. For several clients' steps at once."""
        sizes = [len(x) for x in xs]
        h = xs[0].shape[2]
        if self.on_device:
            drawn = [self._uniforms_on_device(x.shape, range(n), g, x.device) for x, g in zip(xs, gs)]
            u = {name: torch.cat([d[0][name] for d in drawn]) for name in drawn[0][0]}
            blur_p, solarize_p = ([d[k] for d in drawn] for k in (2, 3))
            draw = self._derive(u, h, self._joined(blur_p), self._joined(solarize_p))
            out = self._apply(torch.cat([x.float().div_(255).repeat(n, 1, 1, 1) for x in xs]), draw)
            per = list(out.split([b for b in sizes for _ in range(n)]))
            return [per[i * n:(i + 1) * n] for i in range(len(xs))]
        drawn = [[self._uniforms_on_cpu(x.shape, i, g) for i in range(n)] for x, g in zip(xs, gs)]  # g's order
        images = torch.cat(xs).float().div_(255)
        made = []
        for i in range(n):
            u = {name: torch.cat([d[i][name] for d in drawn]) for name in drawn[0][i]}
            draw = self._derive(u, h, self._probability(self.params.blur_p, i),
                                self._probability(self.params.solarize_p, i))
            made.append(self._apply(images, draw.to(images.device)).split(sizes))
        return [[made[i][c] for i in range(n)] for c in range(len(xs))]

    @staticmethod
    def _joined(per_batch: list[Probability]) -> Probability:
        """Several batches' per-row probabilities as one: the float they share, or their rows joined."""
        return torch.cat(per_batch) if isinstance(per_batch[0], torch.Tensor) else per_batch[0]

    @staticmethod
    def _probability(per_view: Sequence[float], index: int) -> float:
        return per_view[index % len(per_view)]

    @staticmethod
    def _draws(channels: int, blur: bool, solarize: bool) -> tuple[str, ...]:
        """The uniform draws of a view, in the CPU way's order."""
        return (*CROP_FLIP, *(JITTER_RGB if channels == 3 else JITTER_GRAY), *(BLUR if blur else ()),
                *(SOLARIZE if solarize else ()))

    def _batched_views(self, x: torch.Tensor, indices: Sequence[int], g: torch.Generator) -> list[torch.Tensor]:
        """The views ``indices`` of ``x`` (B, C, H, W) made as one batch on ``x``'s device."""
        draw = self.draw_on_device(x.shape, indices, g, x.device)
        out = self._apply(x.float().div_(255).repeat(len(indices), 1, 1, 1), draw)
        return list(out.split(x.shape[0]))

    @staticmethod
    def _device_generator(g: torch.Generator, device: torch.device) -> torch.Generator:
        """A generator on ``device`` seeded by one draw of ``g`` (the loop's CPU generator, which so
        still decides everything): a new one per call, as worker threads share the view maker."""
        seed = int(torch.randint(2 ** 62, (), generator=g, device=g.device))
        return torch.Generator(device=device).manual_seed(seed)

    def _per_row(self, per_view: list[float], b: int, device: torch.device) -> Probability:
        """Per-view probabilities as (views x B,) rows on ``device``; a float where all views share one."""
        if len(set(per_view)) == 1:
            return per_view[0]
        p = self._constant(f"p{per_view}", device, lambda: torch.tensor(per_view))
        return p.repeat_interleave(b)

    def _derive(self, u: dict[str, torch.Tensor], height: int, blur_p: Probability,
                solarize_p: Probability) -> ViewDraw:
        """Turn the uniform draws ``u`` (name -> (M,)) into a view's parameters, on ``u``'s device."""
        params = self.params
        area = _uniform(u["area"], params.crop_min_scale, 1.0)
        log_ratio = _uniform(u["log_ratio"], math.log(3 / 4), math.log(4 / 3))
        w = (area * log_ratio.exp()).sqrt().clamp(max=1.0)
        h = (area / log_ratio.exp()).sqrt().clamp(max=1.0)
        cx = _uniform(u["cx"], -1.0, 1.0) * (1 - w)
        cy = _uniform(u["cy"], -1.0, 1.0) * (1 - h)
        flip = torch.where(u["flip"] < params.flip_p, -1.0, 1.0)
        zero = torch.zeros_like(w)
        theta = torch.stack([w * flip, zero, cx, zero, h, cy], dim=1).view(-1, 2, 3)
        jitter = u["jitter"] < params.jitter_p
        draw = ViewDraw(theta, self._factor(u["bright"], params.brightness, jitter),
                        self._factor(u["contrast"], params.contrast, jitter))
        if "saturation" in u:
            draw.saturation = self._factor(u["saturation"], params.saturation, jitter)
            draw.hue = torch.where(jitter, _uniform(u["hue"], -params.hue, params.hue), zero)
            draw.grayscale = (u["grayscale"] < params.grayscale_p).view(-1, 1, 1, 1)
        if "sigma" in u:
            sigma = torch.where(u["blur"] < blur_p, _uniform(u["sigma"], 0.1, 2.0), 1e-3)
            size = blur_size(height)
            r = torch.arange(size, dtype=torch.float32, device=sigma.device) - size // 2
            k = torch.exp(-(r.view(1, -1) ** 2) / (2 * sigma.view(-1, 1) ** 2))
            draw.kernel = k / k.sum(dim=1, keepdim=True)
        if "solarize" in u:
            draw.solarize = (u["solarize"] < solarize_p).view(-1, 1, 1, 1)
        return draw

    @staticmethod
    def _factor(u: torch.Tensor, strength: float, apply: torch.Tensor) -> torch.Tensor:
        """A jitter factor in [max(0, 1 - strength), 1 + strength) where ``apply``, else 1: (M, 1, 1, 1)."""
        f = _uniform(u, max(0.0, 1 - strength), 1 + strength)
        return torch.where(apply, f, torch.ones_like(f)).view(-1, 1, 1, 1)

    def _apply(self, x: torch.Tensor, d: ViewDraw) -> torch.Tensor:
        """Views of ``x`` (M, C, H, W) in [0, 1] with parameters ``d`` (on ``x``'s device), normalised."""
        grid = F.affine_grid(d.theta, list(x.shape), align_corners=False)
        out = F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        out = (out * d.bright).clamp(0, 1)
        if d.saturation is None:  # one channel: brightness and contrast
            m = out.mean(dim=(1, 2, 3), keepdim=True)
            out = ((out - m) * d.contrast + m).clamp(0, 1)
        else:
            out = self._jitter_rgb(out, d)
            out = torch.where(d.grayscale, _gray(out).expand_as(out), out)
        if d.kernel is not None:
            out = self._blur(out, d.kernel)
        if d.solarize is not None:
            out = torch.where(d.solarize & (out >= 0.5), 1.0 - out, out)
        return self._standardize(out)

    def _jitter_rgb(self, x: torch.Tensor, d: ViewDraw) -> torch.Tensor:
        """Contrast (about the mean luma), saturation and hue of brightness-jittered ``x`` (M, 3, H, W)."""
        m = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
        x = ((x - m) * d.contrast + m).clamp(0, 1)
        gray = _gray(x)
        x = ((x - gray) * d.saturation + gray).clamp(0, 1)
        return self._rotate_hue(x, d.hue, self._constant("yiq", x.device, lambda: torch.tensor(TO_YIQ)),
                                self._constant("yiq_inv", x.device, lambda: torch.linalg.inv(torch.tensor(TO_YIQ))))

    @staticmethod
    def _rotate_hue(x: torch.Tensor, hue: torch.Tensor, to_yiq: torch.Tensor | None = None,
                    from_yiq: torch.Tensor | None = None) -> torch.Tensor:
        """Shift hue by ``hue`` turns (B,) by rotating the I/Q chroma plane of YIQ (``to_yiq`` and its
        inverse ``from_yiq``, (3, 3) on ``x``'s device, made here when not given)."""
        if to_yiq is None:
            to_yiq = torch.tensor(TO_YIQ, device=x.device)
            from_yiq = torch.linalg.inv(to_yiq)
        angle = hue * 2 * math.pi
        cos, sin = angle.cos(), angle.sin()
        one, zero = torch.ones_like(cos), torch.zeros_like(cos)
        rot = torch.stack([one, zero, zero, zero, cos, -sin, zero, sin, cos], dim=1).view(-1, 3, 3)
        m = from_yiq @ rot @ to_yiq  # (B, 3, 3)
        return torch.einsum("bij,bjhw->bihw", m, x).clamp(0, 1)

    @staticmethod
    def _blur(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        """Gaussian blur of ``x`` (B, C, H, W) with one 1-D kernel (B, k) per image, separably, as a
        grouped convolution over the B x C planes (reflect padding)."""
        b, c, h, w = x.shape
        size = kernel.shape[1]
        k = kernel.repeat_interleave(c, dim=0)  # (B*C, size)
        flat = x.reshape(1, b * c, h, w)
        pad = size // 2
        flat = F.conv2d(F.pad(flat, (pad, pad, 0, 0), mode="reflect"), k.view(b * c, 1, 1, size), groups=b * c)
        flat = F.conv2d(F.pad(flat, (0, 0, pad, pad), mode="reflect"), k.view(b * c, 1, size, 1), groups=b * c)
        return flat.view(b, c, h, w)
