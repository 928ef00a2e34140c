"""The measurements ``gpu_check.sh`` makes on a lent GPU, one per call, each printed as one JSON line.

* ``throughput``: images per second of ResNet-18 SimCLR local training (``recipes/fedavg_ssl_cifar10.yaml``
  on synthetic CIFAR-10-sized uint8 images held on the device) at one batch size and precision:
  fedlight's own local loop (``train_client``) with the views drawn on the device and on the CPU
  (``views.on_device``; "not available" where the installed fedlight lacks the key), beside a plain
  single-model loop (the same model, views and optimizer: forward, backward, step, nothing else).
  Each side trains ``--steps`` timed steps after a warm-up; an image is counted once per step
  although it makes two views.
* ``round``: the wall seconds of a recipe's rounds (the history's ``train_seconds``: its clients'
  local work; ``seconds``: the whole round) on synthetic data of the recipe's shape (no download),
  the first round a warm-up. ``--batched KEY=VALUE`` sets a recipe key for batched clients
  (``local.batched_clients=100``: a round's 100 clients as one step), or reports "not available"
  where the installed fedlight does not know the key, and the one-line refusal where it refuses.

* ``report --out DIR``: ``gpu_check.sh``'s results.json and results.md from its steps' records.

``--smoke`` shrinks every size (tiny CNN, a few steps, CPU) so the whole path runs in seconds.

    python benchmarks/gpu_bench.py throughput --batch-size 256 --precision bf16-mixed
    python benchmarks/gpu_bench.py round --recipe benchmarks/workloads/cross_device_fmnist.yaml \\
        --images 2000 clients.num=100 clients.fraction=1.0
    python benchmarks/gpu_bench.py throughput --smoke   # on the CPU, in seconds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
SSL_RECIPE = REPO / "recipes" / "fedavg_ssl_cifar10.yaml"
NOT_AVAILABLE = "not available"
SMOKE = ["model.backbone=tiny_cnn", "fabric.accelerator=cpu", "fabric.threads=1"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _load(path: Path, overrides: list[str]) -> Any | None:
    """The recipe with ``overrides``, or None where the installed fedlight lacks one of their keys."""
    from fedlight.config import load_recipe
    from fedlight.errors import UserError

    try:
        return load_recipe(path, overrides)
    except UserError as exc:
        if str(exc).startswith("unknown recipe key"):
            return None
        raise


def _accelerator(smoke: bool) -> list[str]:
    return SMOKE if smoke else ["fabric.accelerator=gpu" if torch.cuda.is_available() else "fabric.accelerator=cpu"]


def fedlight_images_per_s(recipe: Any, data: Any, steps: int) -> float:
    """Images per second of ``train_client`` on one client holding every image (after a warm-up)."""
    from fedlight.engine.loop.local_loop import steps_per_epoch, train_client
    from fedlight.engine.run.assemble import build_views
    from fedlight.engine.run.fit import build_module, make_fabric

    fabric = make_fabric(recipe)
    module = fabric.to_device(build_module(recipe, data))
    views = build_views(recipe, data, fabric.device) if _takes_device(build_views) else build_views(recipe, data)
    images, labels = fabric.to_device(data.train_x), fabric.to_device(data.train_y)
    idx = torch.arange(len(images), device=images.device)
    batch = recipe.local.batch_size

    def train(n: int, seed: int) -> float:
        epochs = math.ceil(n / steps_per_epoch(len(idx), batch))
        _sync(fabric.device)
        start = time.perf_counter()
        train_client(fabric, module, images, labels, idx, views, epochs, batch,
                     torch.Generator().manual_seed(seed), max_steps=n)
        _sync(fabric.device)
        return time.perf_counter() - start

    train(max(3, steps // 5), 0)
    return steps * batch / train(steps, 1)


def _takes_device(fn: Callable[..., Any]) -> bool:
    import inspect

    return "device" in inspect.signature(fn).parameters


def plain_images_per_s(recipe: Any, data: Any, steps: int) -> float:
    """The same arithmetic in the shortest hand loop: views, forward + loss under autocast, backward, step."""
    from fedlight.engine.run.assemble import build_views
    from fedlight.engine.run.fit import build_module

    device = torch.device("cuda" if recipe.fabric.accelerator in ("gpu", "cuda") else "cpu")
    module = build_module(recipe, data).to(device)
    views = build_views(recipe, data, device) if _takes_device(build_views) else build_views(recipe, data)
    opt = module.configure_optimizers()
    module.train()
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(recipe.fabric.precision)
    images, labels = data.train_x.to(device), data.train_y.to(device)
    batch = recipe.local.batch_size
    g = torch.Generator().manual_seed(0)

    def train(n: int) -> float:
        _sync(device)
        start = time.perf_counter()
        for step in range(n):
            b = torch.randint(len(images), (batch,), generator=g).to(device)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = module.training_step((views.views(images[b], module.num_views, g), labels[b]), step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        _sync(device)
        return time.perf_counter() - start

    train(max(3, steps // 5))
    return steps * batch / train(steps)


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Images per second: fedlight with views on / off the device, and the plain loop."""
    from gpu_profile import synthetic_cifar10

    base = [*_accelerator(args.smoke), "fabric.devices=1", f"fabric.precision={args.precision}",
            f"local.batch_size={args.batch_size}", *args.overrides]
    images = args.images or (4 * args.batch_size if args.smoke else 10_000)
    data = synthetic_cifar10(images, 0, test=20)
    out: dict[str, Any] = {"step": "throughput", "batch_size": args.batch_size, "precision": args.precision,
                           "steps": args.steps, "dataset_images": images}
    for name, extra in (("fedlight_views_on_device", ["views.on_device=true"]),
                        ("fedlight_views_on_cpu", ["views.on_device=false"])):
        recipe = _load(args.recipe, base + extra)
        out[name] = NOT_AVAILABLE if recipe is None else fedlight_images_per_s(recipe, data, args.steps)
    recipe = _load(args.recipe, base)
    out["plain_loop"] = plain_images_per_s(recipe, data, args.steps)
    out["device"] = _device_name(recipe)
    fed = [v for k, v in out.items() if k.startswith("fedlight") and isinstance(v, float)]
    out["fedlight_best_over_plain"] = max(fed) / out["plain_loop"] if fed else None
    return out


def _device_name(recipe: Any) -> str:
    cuda = recipe.fabric.accelerator in ("gpu", "cuda") and torch.cuda.is_available()
    return torch.cuda.get_device_name() if cuda else "cpu"


def synthetic_loader(images: int, test: int) -> Callable[..., Any]:
    """``fit.prepare``'s ``load``: synthetic data of the named dataset's shape (its channels, size and classes)."""
    from fedlight.data.sources import synthetic

    shapes = {"fashion_mnist": (1, 28, 10), "mnist": (1, 28, 10), "cifar10": (3, 32, 10), "cifar100": (3, 32, 100),
              "svhn": (3, 32, 10), "synthetic": (3, 16, 10)}

    def load(name: str, root: str, download: bool, seed: int, columns: tuple = ()) -> Any:  # columns: hf_disk's
        channels, size, classes = shapes[name]
        return synthetic(seed, train=images, test=test, classes=classes, channels=channels, size=size)
    return load


def round_times(args: argparse.Namespace) -> dict[str, Any]:
    """The seconds of each round of ``args.recipe`` on synthetic data (the first round is a warm-up)."""
    from fedlight.engine.run.assemble import build_federation
    from fedlight.engine.run.fit import make_fabric, prepare
    from fedlight.errors import UserError

    out: dict[str, Any] = {"step": "round", "recipe": str(args.recipe), "overrides": args.overrides,
                           "batched": args.batched}
    extra = [args.batched] if args.batched else []
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [*_accelerator(args.smoke), "fabric.devices=1", f"rounds={args.rounds}", "eval.every=1000",
                     "eval.probe_epochs=1", "eval.projector_samples=0", f"run.dir={tmp}/run", *args.overrides, *extra]
        recipe = _load(args.recipe, overrides)
        if recipe is None:
            return {**out, "train_seconds": NOT_AVAILABLE, "seconds": NOT_AVAILABLE}
        (Path(tmp) / "run").mkdir()
        try:
            server, data, parts, module, _ = prepare(recipe, synthetic_loader(args.images, 100))
            fabric = make_fabric(recipe)
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # as fit does once the device is chosen
            federation = build_federation(fabric, recipe, data, parts, module, server, Path(tmp) / "run")
        except UserError as exc:  # e.g. batched clients refusing the recipe: a result, not a crash
            return {**out, "train_seconds": f"refused: {exc}", "seconds": f"refused: {exc}"}
        try:
            history = federation.run()["history"]
        finally:
            federation.workers.close()
        rows = [r for r in history if r.get("round", 0) >= 1]
        out.update(device=_device_name(recipe), clients_per_round=recipe.clients.num * recipe.clients.fraction,
                   train_seconds=[r["train_seconds"] for r in rows], seconds=[r["seconds"] for r in rows])
    return out


def _number(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, (int, float)) else str(v)


def _result(s: dict[str, Any]) -> str:
    """One step's result in words (a markdown cell)."""
    if s.get("step") == "throughput":
        return (f"batch {s['batch_size']} {s['precision']}, images/s: fedlight, views on the device "
                f"{_number(s['fedlight_views_on_device'])}, on the CPU {_number(s['fedlight_views_on_cpu'])}; "
                f"plain loop {_number(s['plain_loop'])}")
    if s.get("step") == "round":
        seconds = s["train_seconds"]
        shown = ", ".join(f"{t:.2f}" for t in seconds) if isinstance(seconds, list) else seconds
        batched = f", {s['batched']}" if s.get("batched") else ""
        return f"{s['recipe']}{batched}: local training s a round (the first a warm-up): {shown}"
    if "images_per_s" in s:  # gpu_profile.py's --json
        return (f"profile, batch {s['batch_size']} {s['precision']}: {_number(s['images_per_s'])} images/s, "
                f"views {s['share_of_wall']['views']:.1%} of the wall time")
    return ""


def report(out: Path) -> list[str]:
    """``out``/results.json (every step's record, in the order ``steps/order.txt`` lists them) and
    ``out``/results.md (a markdown row a step, with the step's seconds from ``steps/*.seconds``) from
    ``gpu_check.sh``'s ``steps/*.json``; returns the rows."""
    names = (out / "steps" / "order.txt").read_text().split()
    steps = [{"name": name, **json.loads((out / "steps" / f"{name}.json").read_text())} for name in names]
    for s in steps:  # the step's whole time, as the shell measured it (a --json's wall_s may time less)
        seconds = out / "steps" / f"{s['name']}.seconds"
        s["step_seconds"] = float(seconds.read_text()) if seconds.is_file() else None
    (out / "results.json").write_text(json.dumps(steps, indent=2) + "\n")
    rows = ["| step | status | wall s | result |", "|---|---|---|---|"]
    for s in steps:
        status = s.get("status", "ok")
        rows.append(f"| {s['name']} | {status} | {_number(s['step_seconds'] or '-')} | "
                    f"{_result(s) if status == 'ok' else ''} |")
    (out / "results.md").write_text("\n".join(rows) + "\n")
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("throughput", "round", "report"))
    p.add_argument("--recipe", type=Path, default=None, help="throughput: a SimCLR recipe (default: ResNet-18 "
                   "CIFAR-10); round: the recipe whose rounds are timed")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", default="bf16-mixed")
    p.add_argument("--steps", type=int, default=50, help="throughput: timed steps per side")
    p.add_argument("--images", type=int, default=None, help="synthetic training images")
    p.add_argument("--rounds", type=int, default=2, help="round: rounds run (the first is a warm-up)")
    p.add_argument("--batched", default=None, metavar="KEY=VALUE",
                   help="round: batched clients' recipe setting (e.g. local.batched_clients=100)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: the code path in seconds")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    p.add_argument("--out", type=Path, default=None, help="report: gpu_check.sh's output folder")
    p.epilog = "key=value arguments (anywhere) are recipe overrides."
    argv = sys.argv[1:] if argv is None else argv
    overrides = [a for i, a in enumerate(argv) if "=" in a and not a.startswith("-")
                 and (i == 0 or argv[i - 1] != "--batched")]
    args = p.parse_args([a for a in argv if a not in overrides])
    args.overrides = overrides
    if args.smoke:
        args.precision, args.batch_size, args.steps = "32-true", 8, 3
    if args.what == "report" and args.out is None:
        p.error("report needs --out")
    if args.recipe is None:
        if args.what == "round":
            p.error("round needs --recipe")
        args.recipe = SSL_RECIPE
    if args.what == "round" and args.images is None:
        args.images = 200 if args.smoke else 2000
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.smoke:
        torch.set_num_threads(1)
    if args.what == "report":
        print("\n".join(report(args.out)))
        return 0
    started = time.perf_counter()
    result = throughput(args) if args.what == "throughput" else round_times(args)
    result["wall_s"] = time.perf_counter() - started
    line = json.dumps(result)
    print(line)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
