"""``local.compile``: which runs it refuses (one line), and a compiled local step training as the eager one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedlight.cli import main
from fedlight.engine.loop import compiled_step
from fedlight.engine.loop.compiled_step import compile_refusal, compile_step, step_function
from fedlight.methods.fedprox import FedProx
from fedlight.methods.federated_module import FederatedModule
from fedlight.methods.simclr import SimCLR
from fedlight.models.backbones import tiny_cnn


def _simclr() -> SimCLR:
    torch.manual_seed(0)
    return SimCLR(tiny_cnn(3, 16), hidden_dim=16, output_dim=8)


def test_refusals_name_the_key_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _simclr()
    assert compile_refusal("none", module, "cpu", 4) is None
    assert "device is cpu; use local.compile=inductor" in compile_refusal("cudagraphs", module, "cpu", 1)
    assert "set fabric.workers=1" in compile_refusal("inductor", module, "cuda", 2)
    assert "drop local.batched_clients" in compile_refusal("inductor", module, "cuda", 1, batched_clients=8)

    class Stateful(SimCLR):
        compile_refusal = "steps an optimizer inside training_step"

    wrapped = FedProx(Stateful(tiny_cnn(3, 16), hidden_dim=16, output_dim=8))
    assert "FedProx steps an optimizer inside training_step" in compile_refusal("inductor", wrapped, "cpu", 1)
    assert compile_refusal("inductor", FedProx(module), "cuda", 1) is None
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(compiled_step.shutil, "which", lambda name: None)
    assert "no C++ compiler" in compile_refusal("inductor", module, "cpu", 1)
    assert compile_refusal("inductor", module, "cuda", 1) is None  # Triton builds GPU kernels
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    assert "torch.compile does not run on Python" in compile_refusal("inductor", module, "cuda", 1)


def test_fit_refuses_before_the_run_folder(tiny_recipe: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["fit", "--recipe", str(tiny_recipe), "local.compile=cudagraphs", "fabric.accelerator=cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "local.compile=cudagraphs" in err
    assert not (tiny_recipe.parent / "run").exists()


class Agreement(FederatedModule):
    """The smallest objective: a linear encoder's two views agree (a step dynamo traces in a second)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        backbone = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
        backbone.feature_dim = 4
        super().__init__(backbone)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        return (self.backbone(x0) - self.backbone(x1)).pow(2).mean()


def test_a_compiled_step_trains_as_the_eager_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo traces the step (backend ``eager``: the same operators run, no kernel build), and it is used."""
    from lightning.fabric import Fabric

    from fedlight.data.views import ViewMaker, ViewParams
    from fedlight.engine.loop.local_loop import train_client

    monkeypatch.setattr(compiled_step, "BACKEND", "eager")
    fabric = Fabric(accelerator="cpu", devices=1)
    views = ViewMaker(ViewParams(), torch.full((3,), 0.5), torch.full((3,), 0.25))
    images = torch.randint(0, 256, (24, 3, 16, 16), dtype=torch.uint8)
    eager, compiled = Agreement(), Agreement()
    compile_step(compiled, "inductor")
    assert step_function(eager) == eager.training_step and step_function(compiled).func is not compiled.training_step
    from torch._dynamo.utils import counters

    counters.clear()
    results = [train_client(fabric, m, images, torch.zeros(24, dtype=torch.long), torch.arange(24), views, 1, 8,
                            torch.Generator().manual_seed(0)) for m in (eager, compiled)]
    assert results[0].steps == results[1].steps == 3 and counters["stats"]["unique_graphs"] >= 1  # traced
    assert abs(results[0].loss_sum - results[1].loss_sum) < 1e-4
    for a, b in zip(eager.parameters(), compiled.parameters()):
        assert torch.allclose(a, b, atol=1e-5)
    compile_step(compiled, "cudagraphs")  # its per-step mark runs on the CPU too (the graphs need CUDA)
    assert train_client(fabric, compiled, images, torch.zeros(24, dtype=torch.long), torch.arange(24), views, 1, 8,
                        torch.Generator().manual_seed(0)).steps == 3
    compile_step(compiled, "none")
    assert step_function(compiled) == compiled.training_step
