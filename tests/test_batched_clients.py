"""local.batched_clients: several clients trained as one step equal the same clients trained one by one."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from lightning.fabric import Fabric

from fedlight.data.views import ViewMaker, ViewParams
from fedlight.engine.loop.batched_clients import finish_client
from fedlight.engine.parts.fedavg.epoch_schedule import EpochSchedule
from fedlight.methods.byol import BYOL
from fedlight.methods.federated_module import FederatedModule, OptimizerSpec
from fedlight.methods.fedprox import FedProx
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
    """Equal up to float noise: within 5e-4 of the tensor's largest magnitude (one-by-one training
    itself moves this far on 1 thread against 2: a batch of 4 through BatchNorm amplifies rounding);
    integer buffers (BatchNorm's batch counter) exactly."""
    if not expected.is_floating_point():
        return torch.equal(got, expected)
    return bool((got - expected).abs().max() <= 5e-4 * expected.abs().max() + 1e-7) if expected.numel() else True


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
    return start


@pytest.mark.parametrize(("method", "optimizer"), [("simclr", "adam"), ("byol", "sgd"), ("supervised", "sgd"),
                                                   ("fedprox", "adamw"), ("supervised", "adam")])
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
