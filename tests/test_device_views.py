"""Views drawn on the device (``views.on_device``), exercised with device=cpu: the same distributions
as the CPU way's, reproducible from the loop's generator, and a run end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedlight.data.views import ViewDraw, ViewMaker, ViewParams, views_on_device

CPU = torch.device("cpu")
PARAMS = ViewParams(blur_p=(1.0, 0.1), solarize_p=(0.0, 0.2))


def _maker(on_device: bool, params: ViewParams = PARAMS) -> ViewMaker:
    return ViewMaker(params, torch.full((3,), 0.5), torch.full((3,), 0.25), on_device=on_device)


def _draws(b: int, view: int) -> tuple[ViewDraw, ViewDraw]:
    """View ``view``'s parameters for ``b`` images drawn the CPU way and the device way (as the second of two
    views drawn in one call, so the per-view rows are checked too)."""
    shape = torch.Size((b, 3, 32, 32))
    cpu = _maker(False).draw_on_cpu(shape, view, torch.Generator().manual_seed(0))
    both = _maker(True).draw_on_device(shape, [1 - view, view], torch.Generator().manual_seed(1), CPU)
    part = slice(b, 2 * b)  # rows of the second view
    return cpu, ViewDraw(**{k: None if v is None else v[part] for k, v in vars(both).items()})


def _summary(d: ViewDraw) -> dict[str, torch.Tensor]:
    """The random quantities of a draw, each (M,) float."""
    w, h = d.theta[:, 0, 0].abs(), d.theta[:, 1, 1]
    return {"crop_area": w * h, "aspect": w / h, "flip": (d.theta[:, 0, 0] < 0).float(),
            "offset_x": d.theta[:, 0, 2], "bright": d.bright.flatten(), "contrast": d.contrast.flatten(),
            "saturation": d.saturation.flatten(), "hue": d.hue, "grayscale": d.grayscale.flatten().float(),
            "blurred": (d.kernel.amax(dim=1) < 0.999).float(),  # sigma over ~0.27
            "solarize": torch.zeros(len(w)) if d.solarize is None else d.solarize.flatten().float()}


@pytest.mark.parametrize("view", [0, 1])
def test_device_draws_have_the_cpu_draws_distribution(view: int) -> None:
    cpu, device = _draws(10_000, view)
    for name, (a, b) in {k: (v, _summary(device)[k]) for k, v in _summary(cpu).items()}.items():
        assert abs(a.mean() - b.mean()) < 0.02, name
        assert abs(a.var() - b.var()) < 0.02, name
        assert abs(a.min() - b.min()) < 0.02 and abs(a.max() - b.max()) < 0.02, name
    device = _summary(device)  # each view its own blur_p and solarize_p (0.91 vs 0.09 visibly blurred)
    assert abs(device["blurred"].mean() - (0.91, 0.091)[view]) < 0.02
    assert abs(device["solarize"].mean() - (0.0, 0.2)[view]) < 0.02
    assert abs(device["flip"].mean() - 0.5) < 0.02 and 0.2 - 1e-6 <= device["crop_area"].min()


def test_device_views_have_the_cpu_views_pixel_moments() -> None:
    ramp = torch.linspace(0, 255, 16)  # an image whose channels differ: red left-right, green top-down
    x = torch.stack([ramp.view(1, -1).expand(16, 16), ramp.view(-1, 1).expand(16, 16),
                     torch.full((16, 16), 90.0)]).to(torch.uint8).expand(1024, 3, 16, 16)
    cpu = torch.cat(_maker(False).views(x, 2, torch.Generator().manual_seed(0)))
    device = torch.cat(_maker(True).views(x, 2, torch.Generator().manual_seed(0)))
    assert device.shape == cpu.shape == (2048, 3, 16, 16)
    for stat in (lambda v: v.mean(dim=(0, 2, 3)), lambda v: v.std(dim=(0, 2, 3))):  # seeds differ by ~0.01
        assert torch.allclose(stat(cpu), stat(device), atol=0.04)


def test_device_views_are_seeded_by_the_loops_generator() -> None:
    x = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    vm = _maker(True)
    g = torch.Generator().manual_seed(0)
    a, b = vm.views(x, 2, torch.Generator().manual_seed(0)), vm.views(x, 2, g)
    assert all(torch.equal(u, v) for u, v in zip(a, b)) and not torch.equal(a[0], a[1])
    assert not torch.equal(vm.views(x, 2, g)[0], b[0])  # the generator moved on: the next batch differs
    assert torch.equal(vm.view(x, 1, torch.Generator().manual_seed(3)), vm.view(x, 1, torch.Generator().manual_seed(3)))


def test_device_views_keep_the_memory_format_and_grayscale_images() -> None:
    x = torch.randint(0, 256, (4, 1, 16, 16), dtype=torch.uint8)
    vm = ViewMaker(ViewParams(), torch.zeros(1), torch.ones(1), channels_last=True, on_device=True)
    views = vm.views(x, 3, torch.Generator().manual_seed(0))
    assert len(views) == 3 and all(v.shape == x.shape and v.is_contiguous(memory_format=torch.channels_last)
                                   for v in views)
    assert all(0 <= v.min() and v.max() <= 1 for v in views)


def test_on_device_defaults_to_cuda_only() -> None:
    assert views_on_device(None, torch.device("cuda", 0)) and not views_on_device(None, CPU)
    assert views_on_device(True, CPU) and not views_on_device(False, torch.device("cuda"))


def test_a_run_with_views_on_the_device(tiny_recipe: Path) -> None:
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import fit

    results = fit(load_recipe(tiny_recipe, ["rounds=1", "views.on_device=true", "eval.probe_epochs=2"]))
    last = results["history"][-1]
    assert last["round"] == 1 and 0 < last["train_loss"] < 10
