"""local.batched_clients: several clients trained as one step equal the same clients trained one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import torch
from lightning.fabric import Fabric

from fedlight.config import load_recipe
from fedlight.data.views import ViewMaker, ViewParams
from fedlight.engine.loop.batched_clients import batch_refusal, finish_client
from fedlight.engine.parts.fedavg.epoch_schedule import EpochSchedule
from fedlight.engine.run.fit import check_elsewhere, fit
from fedlight.errors import UserError
from fedlight.methods.byol import BYOL
from fedlight.methods.fair import FairLocalGlobal
from fedlight.methods.fedbn import FedBN
from fedlight.methods.fedema import FedEMA
from fedlight.methods.federated_module import FederatedModule, OptimizerSpec
from fedlight.methods.fedprox import FedProx
from fedlight.methods.local_global import LocalGlobal
from fedlight.methods.moon import MOON
from fedlight.methods.scaffold_client import Scaffold
from fedlight.methods.simclr import SimCLR
from fedlight.methods.supervised import Supervised
from fedlight.models.backbones import SmallCNN

SIZES = (16, 12, 23, 10, 5)  # batch 6: steps 3, 2, 4, 2, 1 an epoch; last batches of 4, 6, 5, 4 and 5
WORKS = (1.0, 1.0, 0.5, 1.0, 1.0)  # client 2 a straggler: 4 of its 8 steps


def _backbone() -> SmallCNN:
    return SmallCNN(3, (8, 16, 16))


METHODS: dict[str, Callable[[OptimizerSpec], FederatedModule]] = {
    "simclr": lambda o: SimCLR(_backbone(), o, hidden_dim=16, output_dim=8),
    "byol": lambda o: BYOL(_backbone(), o, hidden_dim=16, output_dim=8, momentum=0.9),
    "supervised": lambda o: Supervised(_backbone(), 10, o),
    "fedprox": lambda o: FedProx(SimCLR(_backbone(), o, hidden_dim=16, output_dim=8), mu=0.5),
    "fedema": lambda o: FedEMA(BYOL(_backbone(), o, hidden_dim=16, output_dim=8, momentum=0.9)),
}
OPTIMIZERS = {"adam": OptimizerSpec("adam", lr=1e-3, weight_decay=1e-4),
              "sgd": OptimizerSpec("sgd", lr=0.01, momentum=0.9, weight_decay=1e-4),
              "adamw": OptimizerSpec("adamw", lr=1e-3, weight_decay=1e-2)}


def _schedule() -> EpochSchedule:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (sum(SIZES), 3, 16, 16), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (sum(SIZES),), generator=g)
    bounds = torch.tensor((0, *SIZES)).cumsum(0).tolist()
    parts = [torch.arange(a, b) for a, b in zip(bounds, bounds[1:])]
    views = ViewMaker(ViewParams(), torch.full((3,), 0.5), torch.full((3,), 0.25), channels_last=True)
    return EpochSchedule(Fabric(accelerator="cpu", devices=1), images, labels, parts, views, epochs=2, batch_size=6)


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in [*module.named_parameters(), *module.named_buffers()]}


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to float noise: within 5e-4 of the tensor's largest magnitude, or of 0.05 where that
    is smaller (one-by-one training itself moves this far on 1 thread against 2: a batch of 4 through
    BatchNorm amplifies rounding). The floor is for BatchNorm's shifts: they start at 0 and hold about
    2e-3 after two rounds, yet carry their layer's rounding (1e-5 on 1 thread), while a real difference
    (another client's batch) moves them by their own size; integer buffers (BatchNorm's batch counter)
    exactly."""
    if not expected.is_floating_point():
        return torch.equal(got, expected)
    if not expected.numel():
        return True
    return bool((got - expected).abs().max() <= 5e-4 * max(expected.abs().max().item(), 0.05))


def _starts(module: FederatedModule) -> Callable[[int], None]:
    """Each client starts from its own state (the model plus a client-sized nudge), its private
    state reset from it (BYOL's target: a copy of its online network) as a new client's is."""
    initial = {k: v.clone() for k, v in module.state_dict().items()}

    def start(client: int) -> None:
        module.load_state_dict(initial)
        with torch.no_grad():
            for p in module.parameters():
                p.add_(0.01 * client)
        module.reset_private_state()
        if isinstance(module, FedEMA) and client % 2:  # back with a model of its own: merged as training starts
            with torch.no_grad():
                for own, p in zip(module.local.parameters(), module.parameters()):
                    own.copy_(0.9 * p)
            module.local.valid.fill_(True)
    return start


@pytest.mark.parametrize(("method", "optimizer"), [("simclr", "adam"), ("byol", "sgd"), ("supervised", "sgd"),
                                                   ("fedprox", "adamw"), ("supervised", "adam"),
                                                   ("fedema", "sgd")])
def test_batched_clients_equal_one_by_one(method: str, optimizer: str) -> None:
    """Five clients of five sizes (different step counts, last batches of other sizes, a straggler)
    with BatchNorm: every parameter and buffer (running statistics, BYOL's target network) and
    each client's loss and steps equal one-by-one training from the same generators."""
    torch.manual_seed(0)
    module, schedule = METHODS[method](OPTIMIZERS[optimizer]), _schedule()
    start, clients = _starts(module), list(range(len(SIZES)))
    generator = lambda c: torch.Generator().manual_seed(100 + c)  # noqa: E731
    alone = {}
    for c in clients:
        start(c)
        work = schedule.train(module, c, 0, generator(c), {}, WORKS[c])
        alone[c] = (work, _tensors(module))
    together = schedule.train_together(module, clients, 0, [generator(c) for c in clients], list(WORKS), start)
    for c, (work, tensors) in zip(clients, together):
        finish_client(module, tensors)
        expected_work, expected = alone[c]
        assert work.result.steps == expected_work.result.steps
        assert work.weight == expected_work.weight == SIZES[c]
        assert work.result.loss_sum == pytest.approx(expected_work.result.loss_sum, rel=1e-4)
        got = _tensors(module)
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            assert _close(got[name], value), f"client {c}: {name}"
    assert [w.result.steps for w, _ in together] == [6, 4, 4, 4, 2]


@pytest.mark.parametrize("on_device", [False, True])
def test_views_of_many_clients_in_one_call_equal_their_views_one_by_one(on_device: bool) -> None:
    """A batched step makes its clients' views in one call (``views_of_many``): the same draws from each
    client's generator, which ends where ``views`` leaves it, and the same views to the bit, whatever the
    batch sizes and per-view blur and solarise probabilities."""
    params = ViewParams(blur_p=(1.0, 0.1), solarize_p=(0.0, 0.2))
    views = ViewMaker(params, torch.full((3,), 0.5), torch.full((3,), 0.25), channels_last=True, on_device=on_device)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (b, 3, 16, 16), dtype=torch.uint8, generator=g) for b in (6, 4, 6, 5)]
    alone = [torch.Generator().manual_seed(c) for c in range(len(batches))]
    together = [torch.Generator().manual_seed(c) for c in range(len(batches))]
    expected = [views.views(x, 2, g) for x, g in zip(batches, alone)]
    made = views.views_of_many(batches, 2, together)
    for want, got in zip(expected, made):
        assert len(got) == 2
        for a, b in zip(want, got):
            assert torch.equal(a, b) and a.stride() == b.stride()
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(alone, together))


def test_a_run_with_batched_clients_equals_one_by_one(tmp_path: Path, tiny_recipe: Path) -> None:
    """Through the round loop: BYOL's targets go into the store after round 1 and come back in round 2,
    a dropped client is skipped, groups of 3 split the 4 answering clients 3 + 1; the global model,
    the losses and every stored target equal the one-by-one run's."""
    runs = {}
    for name, batched in (("alone", "null"), ("together", "3")):
        runs[name] = fit(load_recipe(tiny_recipe, [
            "clients.num=5", "model.backbone=tiny_cnn", "method.name=byol", "method.hidden_dim=32",
            "method.output_dim=16", "local.batch_size=16", "data.subset=200", "eval.projector_samples=0",
            "local.optimizer=sgd", "local.lr=0.01",  # Adam turns a zero gradient's rounding into whole steps
            "eval.probe_epochs=1", "eval.every=2", "faults.dropout=0.2", f"local.batched_clients={batched}",
            f"run.dir={tmp_path / name}"]))
    saved = {name: torch.load(tmp_path / name / "checkpoints/last.pt", weights_only=True) for name in runs}
    alone, together = runs["alone"]["history"], runs["together"]["history"]
    assert [h["clients"] for h in alone] == [h["clients"] for h in together]
    assert any(h["dropped"] for h in alone)
    for a, b in zip(alone, together):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
    for key, value in saved["alone"]["global"].items():
        assert _close(saved["together"]["global"][key], value), key
    stores = saved["alone"]["clients"], saved["together"]["clients"]
    assert sorted(stores[0]) == sorted(stores[1])
    for c, state in stores[0].items():
        assert all(_close(stores[1][c][k], v) for k, v in state.items()), c


@pytest.mark.parametrize(("overrides", "refusal"), [
    (["method.name=moon"], "method.name=moon cannot: its model-contrastive term"),
    (["method.name=scaffold", "server.name=scaffold"], "method.name=scaffold cannot: its correction"),
    (["stream.velocity=50"], "local.schedule=stream cannot: each client's next batch"),
    (["fabric.precision=16-mixed"], "full precision, not fabric.precision=16-mixed"),
    (["fabric.precision=bf16-mixed"], "full precision, not fabric.precision=bf16-mixed"),
])
def test_methods_and_schedules_that_cannot_are_refused_in_one_line(tiny_recipe: Path, overrides: list[str],
                                                                     refusal: str) -> None:
    recipe = load_recipe(tiny_recipe, ["local.batched_clients=4", *overrides])
    with pytest.raises(UserError, match=refusal) as error:
        check_elsewhere(recipe)
    assert "\n" not in str(error.value) and str(error.value).endswith("drop local.batched_clients")


@pytest.mark.parametrize("value", ["1", "true", "0"])
def test_batched_clients_must_be_at_least_two(tiny_recipe: Path, value: str) -> None:
    with pytest.raises(UserError, match="local.batched_clients"):
        load_recipe(tiny_recipe, [f"local.batched_clients={value}"])


def test_which_methods_can_train_clients_together() -> None:
    """The declared refusals: what a step over several clients can and cannot hold."""
    backbone, optim = _backbone(), OptimizerSpec()
    can = [SimCLR(backbone, optim), BYOL(backbone, optim), Supervised(backbone, 10, optim),
           FedProx(Supervised(backbone, 10, optim)), FedBN(SimCLR(backbone, optim)), FedEMA(BYOL(backbone, optim)),
           LocalGlobal(SimCLR(backbone, optim), 10, ["head"])]
    cannot = [MOON(backbone, 10, optim), Scaffold(SimCLR(backbone, optim)),
              FairLocalGlobal(Supervised(backbone, 10, optim), 10, ["classifier"])]
    assert [batch_refusal(m) for m in can] == [None] * len(can)
    assert all(batch_refusal(m) for m in cannot)
