"""GPU profile of fedlight's local training: ResNet-18 SimCLR on CIFAR-10-sized uint8 data.

Runs fedlight's real local-training path, not a hand loop: the recipe
``recipes/fedavg_ssl_cifar10.yaml`` (SimCLR, ResNet-18 with the CIFAR stem, SimCLR views) loaded
with ``fedlight.config.load_recipe``, the Fabric from ``fedlight.engine.run.fit.make_fabric``, the
model from ``fedlight.engine.run.fit.build_module`` (channels-last as in a run), the views from
``fedlight.engine.run.assemble.build_views`` and the steps from
``fedlight.engine.loop.local_loop.train_client``, one call per client. The data are synthetic
(no download): ``--images`` seeded random uint8 images (N, 3, 32, 32) with CIFAR-10's 10
classes, held on the device as the engine holds them, split evenly over ``--clients``.

It measures, after a warm-up client that is not timed:

* images per second through local training: the images drawn into the timed batches
  (``batch size x steps`` when batches are full) over the timed wall time. Each image is
  counted once although it becomes one pair of views (SimCLR's two views: two forward passes).
* peak GPU memory: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over the
  timed phase (the uint8 dataset on the device included).
* the share of wall time outside forward/backward: ``module.training_step`` (forward + loss,
  under Fabric's autocast) and ``fabric.backward`` are wrapped at run time (no engine file is
  changed) with CUDA events; their summed GPU-timeline durations over the wall time leave the
  share spent elsewhere. The view making (``ViewMaker.views``) and the optimizer step (between
  the ``on_before_optimizer_step`` and ``on_train_batch_end`` hooks) are timed the same way;
  the rest ("other") is indexing, ``zero_grad``, hooks and the engine's per-client work. Host
  (CPU-side) durations of the same regions are reported too: where the host waits on the GPU
  inside a region, its host time exceeds its GPU time.

Where no CUDA device is present it prints one line and exits 0. ``--allow-cpu`` runs the same
path on the CPU at tiny sizes (a smoke test of the code, not a measurement).

    python benchmarks/gpu_profile.py [--clients 4] [--steps 25] [--batch-size 256]
        [--precision bf16-mixed] [--json profile.json] [key=value ...]

Trailing ``key=value`` items override the recipe (for example ``method.loss=ntxent``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = REPO / "recipes" / "fedavg_ssl_cifar10.yaml"
NO_CUDA = "no CUDA device: the GPU profile needs one; nothing measured"
REGIONS = ("views", "forward_loss", "backward", "optimizer_step")
LABELS = {"views": "views (augmentation)", "forward_loss": "forward + loss", "backward": "backward",
          "optimizer_step": "optimizer step", "other": "other (indexing, zero_grad, hooks, engine)"}
MIB = 2 ** 20


def default_precision() -> str:
    """``bf16-mixed`` where the CUDA device supports bf16, else ``32-true`` (recipe spelling)."""
    return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE, help="a SimCLR ResNet-18 recipe")
    p.add_argument("--clients", type=int, default=4, help="clients trained one after another (timed)")
    p.add_argument("--steps", type=int, default=25, help="timed optimizer steps per client")
    p.add_argument("--warmup-steps", type=int, default=5, help="steps of the untimed warm-up client")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--images", type=int, default=None,
                   help="synthetic training images (N, 3, 32, 32); default 10,000 (--allow-cpu: 2 batches a client)")
    p.add_argument("--precision", default=None, help="fabric.precision (default: bf16-mixed if supported, "
                   "else 32-true)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic images")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the results here")
    p.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # smoke test without a GPU
    p.add_argument("overrides", nargs="*", help="recipe overrides key=value")
    args = p.parse_args(argv)
    if min(args.clients, args.steps, args.warmup_steps, args.batch_size - 1, args.images or 1) < 1:
        p.error("--clients, --steps, --warmup-steps and --images must be >= 1 and --batch-size >= 2")
    return args


def load_profile_recipe(args: argparse.Namespace, accelerator: str) -> Any:
    """The recipe with this profile's device, precision and batch size set (user overrides last)."""
    from fedlight.config import load_recipe

    overrides = [f"fabric.accelerator={accelerator}", "fabric.devices=1", "fabric.num_nodes=1",
                 f"fabric.precision={args.precision}", f"local.batch_size={args.batch_size}"]
    if accelerator == "cpu":
        overrides.append("fabric.threads=1")  # a smoke test: stay off the other cores
    return load_recipe(args.recipe, overrides + list(args.overrides))


def synthetic_cifar10(n: int, seed: int, test: int = 100) -> Any:
    """``n`` seeded random uint8 CIFAR-10-sized images (n, 3, 32, 32) with 10 classes, on the CPU.

    Kept on the CPU as ``fedlight.data.sources`` loads every dataset; the profile moves the
    training images to the device as the engine does.
    """
    from fedlight.data.image_data import ImageData

    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n + test, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (n + test,), generator=g)
    return ImageData(images[:n], labels[:n], images[n:], labels[n:], num_classes=10)


class RegionTimer:
    """Durations of named code regions: host clock always, CUDA events on the GPU's timeline.

    A region is open between ``begin(name)`` and ``end(name)``; only regions closed while
    ``active`` are kept. CUDA events are read once, after a synchronisation, in ``totals``.
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.active = False
        self.images = 0
        self._open: dict[str, tuple[float, Any]] = {}
        self._spans: dict[str, list[tuple[tuple[float, Any], tuple[float, Any]]]] = defaultdict(list)

    def _mark(self) -> tuple[float, Any]:
        event = None
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        return time.perf_counter(), event

    def begin(self, name: str) -> None:
        self._open[name] = self._mark()

    def end(self, name: str) -> None:
        start = self._open.pop(name, None)
        if start is not None and self.active:
            self._spans[name].append((start, self._mark()))

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed as region ``name``."""
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.begin(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.end(name)
        return timed

    def totals(self) -> tuple[dict[str, float], dict[str, float] | None]:
        """Summed seconds per region: (host, GPU timeline or None without CUDA)."""
        if self.cuda:
            torch.cuda.synchronize()
        host = {n: sum(b[0] - a[0] for a, b in self._spans.get(n, [])) for n in REGIONS}
        if not self.cuda:
            return host, None
        gpu = {n: sum(a[1].elapsed_time(b[1]) for a, b in self._spans.get(n, [])) / 1000 for n in REGIONS}
        return host, gpu


def _patch(stack: ExitStack, obj: Any, name: str, value: Callable[..., Any]) -> None:
    """Set instance attribute ``obj.name`` for the life of ``stack`` (the class's method returns after)."""
    setattr(obj, name, value)
    stack.callback(delattr, obj, name)


@contextmanager
def instrumented(fabric: Any, module: Any, views: Any, timer: RegionTimer) -> Iterator[None]:
    """Time the engine's regions by wrapping the objects it calls (its code is left as it is)."""
    before_step, after_step = module.on_before_optimizer_step, module.on_train_batch_end
    make_views = views.views

    def counted_views(x: torch.Tensor, *args: Any) -> list[torch.Tensor]:
        if timer.active:
            timer.images += x.shape[0]
        return make_views(x, *args)

    def step_begins(*args: Any, **kwargs: Any) -> Any:
        out = before_step(*args, **kwargs)
        timer.begin("optimizer_step")
        return out

    def step_ended(*args: Any, **kwargs: Any) -> Any:
        timer.end("optimizer_step")
        return after_step(*args, **kwargs)

    with ExitStack() as stack:
        _patch(stack, views, "views", timer.wrap("views", counted_views))
        _patch(stack, module, "training_step", timer.wrap("forward_loss", module.training_step))
        _patch(stack, fabric, "backward", timer.wrap("backward", fabric.backward))
        _patch(stack, module, "on_before_optimizer_step", step_begins)
        _patch(stack, module, "on_train_batch_end", step_ended)
        yield


def train_clients(fabric: Any, module: Any, images: torch.Tensor, labels: torch.Tensor,
                  parts: list[torch.Tensor], views: Any, recipe: Any, steps: int, round_: int) -> int:
    """``steps`` optimizer steps of ``train_client`` for each client in ``parts``; returns all steps."""
    from fedlight.engine.loop.local_loop import steps_per_epoch, train_client
    from fedlight.seeding import torch_generator

    done = 0
    batch = recipe.local.batch_size
    for client, idx in enumerate(parts):
        epochs = math.ceil(steps / steps_per_epoch(len(idx), batch))
        generator = torch_generator(recipe.seed, "local", round_, client)
        result = train_client(fabric, module, images, labels, idx, views, epochs, batch, generator, max_steps=steps)
        done += result.steps
    return done


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def profile(args: argparse.Namespace, cuda: bool) -> dict[str, Any]:
    """Build the engine's pieces, warm up, time the clients; returns the results mapping."""
    from fedlight.engine.run.assemble import build_views
    from fedlight.engine.run.fit import build_module, make_fabric

    recipe = load_profile_recipe(args, "cuda" if cuda else "cpu")
    data = synthetic_cifar10(args.images, args.seed)
    fabric = make_fabric(recipe)
    fabric.launch()
    if recipe.fabric.threads:
        torch.set_num_threads(recipe.fabric.threads)
    module = fabric.to_device(build_module(recipe, data))
    views = build_views(recipe, data, fabric.device)  # from the CPU data, as the engine builds them
    images, labels = fabric.to_device(data.train_x), fabric.to_device(data.train_y)
    parts = [p.to(images.device) for p in torch.arange(len(data.train_x)).chunk(args.clients)]
    timer = RegionTimer(cuda)
    with instrumented(fabric, module, views, timer):
        train_clients(fabric, module, images, labels, parts[:1], views, recipe, args.warmup_steps, round_=0)
        _sync(cuda)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        timer.active = True
        start = time.perf_counter()
        steps = train_clients(fabric, module, images, labels, parts, views, recipe, args.steps, round_=1)
        _sync(cuda)
        wall = time.perf_counter() - start
        timer.active = False
    host, gpu = timer.totals()
    return summarize(args, recipe, cuda, wall, steps, timer.images, host, gpu)


def _shares(times: dict[str, float], wall: float) -> dict[str, float]:
    out = {n: times[n] / wall for n in REGIONS}
    out["other"] = max(0.0, 1 - sum(out.values()))
    return out


def summarize(args: argparse.Namespace, recipe: Any, cuda: bool, wall: float, steps: int, images: int,
              host: dict[str, float], gpu: dict[str, float] | None) -> dict[str, Any]:
    """The results mapping written by ``--json``."""
    measured = gpu if gpu is not None else host  # the GPU timeline where there is one
    inside = measured["forward_loss"] + measured["backward"]
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if cuda else "cpu (--allow-cpu smoke run)",
        "torch": torch.__version__,
        "recipe": str(args.recipe), "method": recipe.method.get("name"), "backbone": recipe.model.backbone,
        "precision": recipe.fabric.precision, "batch_size": recipe.local.batch_size,
        "clients": args.clients, "steps_per_client": args.steps, "steps": steps, "dataset_images": args.images,
        "images": images, "images_note": "images drawn into timed batches; each makes one pair of views",
        "wall_s": wall, "images_per_s": images / wall,
        "timeline": "gpu" if gpu is not None else "host",
        "time_s": measured, "host_time_s": host, "gpu_time_s": gpu,
        "share_of_wall": _shares(measured, wall), "host_share_of_wall": _shares(host, wall),
        "share_outside_forward_backward": 1 - inside / wall,
        "peak_allocated_mib": torch.cuda.max_memory_allocated() / MIB if cuda else None,
        "peak_reserved_mib": torch.cuda.max_memory_reserved() / MIB if cuda else None,
    }
    return out


def print_table(r: dict[str, Any]) -> None:
    """A short readable summary of ``r`` (from ``summarize``)."""
    print(f"GPU profile: {r['method']} / {r['backbone']}, {r['clients']} clients x {r['steps_per_client']} steps, "
          f"batch {r['batch_size']}, {r['precision']}, on {r['device']}")
    print(f"  images/s                {r['images_per_s']:>12,.1f}   ({r['images']:,} images, one view pair each, "
          f"in {r['wall_s']:.2f} s)")
    if r["peak_allocated_mib"] is not None:
        print(f"  peak GPU memory         {r['peak_allocated_mib']:>12,.0f} MiB allocated, "
              f"{r['peak_reserved_mib']:,.0f} MiB reserved")
    else:
        print("  peak GPU memory                  n/a (no CUDA)")
    print(f"  {'region (' + r['timeline'] + ' timeline)':<44}{'seconds':>9}{'share':>8}{'host share':>12}")
    shares, host_shares = r["share_of_wall"], r["host_share_of_wall"]
    for name in (*REGIONS, "other"):
        seconds = r["time_s"][name] if name in r["time_s"] else shares["other"] * r["wall_s"]
        print(f"  {LABELS[name]:<44}{seconds:>9.3f}{shares[name]:>8.1%}{host_shares[name]:>12.1%}")
    print(f"  share of wall time outside forward/backward: {r['share_outside_forward_backward']:.1%}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print(NO_CUDA)
        return 0
    if args.precision is None:
        args.precision = default_precision()
    if args.images is None:
        args.images = 10_000 if cuda else 2 * args.clients * args.batch_size
    results = profile(args, cuda)
    print_table(results)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
