"""FedAdagrad / FedAdam / FedYogi (Reddi et al. 2021, Algorithm 2) on hand-computed tensors, then tiny real runs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from conftest import SMALL_RUN
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop.federation import TIMING
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.registry import build_server
from fedlight.server.fedopt import FedOpt

FAST = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0"]
# eta = 1, beta1 = beta2 = 0.5, tau = 0.5 (v_{-1} = 0.25), x_0 = [0, 0]; the two rounds' pseudo-gradients
# Delta_1 = [1, -0.2], Delta_2 = [-1, 0.4]; m_1 = [0.5, -0.1], m_2 = 0.5 m_1 + 0.5 Delta_2 = [-0.25, 0.15].
HYPER = {"server_lr": 1.0, "beta1": 0.5, "tau": 0.5}
EXPECTED = {  # v_1, x_1 = m_1 / (sqrt(v_1) + 0.5), v_2, x_2 = x_1 + m_2 / (sqrt(v_2) + 0.5)
    # v_1 = 0.25 + [1, 0.04]; v_2 = v_1 + [1, 0.16]; x_2[0] = x_1[0] - 0.25 / (1.5 + 0.5)
    "fedadagrad": ([1.25, 0.29], [0.309016994, -0.096291202], [2.25, 0.45], [0.184016994, 0.031824093]),
    # v_1 = 0.5 * 0.25 + 0.5 * [1, 0.04]; v_2 = 0.5 v_1 + 0.5 * [1, 0.16]
    "fedadam": ([0.625, 0.145], [0.387425887, -0.113534614], [0.8125, 0.1525], [0.209031301, 0.054907719]),
    # v_1 = 0.25 - 0.5 [1, 0.04] sign(0.25 - [1, 0.04]) = [0.75, 0.23];
    # v_2 = v_1 - 0.5 [1, 0.16] sign(v_1 - [1, 0.16]) = [0.75 + 0.5, 0.23 - 0.08]
    "fedyogi": ([0.75, 0.23], [0.366025404, -0.102084238], [1.25, 0.15], [0.211516907, 0.066968260]),
}


def _round(server: FedOpt, x: dict[str, torch.Tensor], delta: list[float]) -> dict[str, torch.Tensor]:
    """Two clients (weights 1 and 3) whose weighted mean is ``x["w"] + delta``; BN statistics 2 and 6
    (mean 5), counters 4 and 8 (mean 7)."""
    d = torch.tensor(delta)
    a = {"w": x["w"] + d + torch.tensor([1.5, -0.3]), "bn.running_mean": torch.tensor([2.0]),
         "bn.num_batches_tracked": torch.tensor(4)}
    b = {"w": x["w"] + d - torch.tensor([0.5, -0.1]), "bn.running_mean": torch.tensor([6.0]),
         "bn.num_batches_tracked": torch.tensor(8)}
    acc = server.accumulate(server.accumulate(None, a, 1.0), b, 3.0)
    return server.finalize(x, acc)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_two_rounds_hand_computed(name: str) -> None:
    server = build_server({"name": name, **HYPER, **({"beta2": 0.5} if name != "fedadagrad" else {})}, 2)
    x0 = {"w": torch.zeros(2), "bn.running_mean": torch.zeros(1), "bn.num_batches_tracked": torch.tensor(0)}
    v1, x1, v2, x2 = (torch.tensor(e, dtype=torch.float64) for e in EXPECTED[name])
    s1 = _round(server, x0, [1.0, -0.2])
    assert torch.allclose(server.m["w"].double(), torch.tensor([0.5, -0.1], dtype=torch.float64))
    assert torch.allclose(server.v["w"].double(), v1) and torch.allclose(s1["w"].double(), x1, atol=1e-7)
    # BN statistics and integer buffers: averaged as FedAvg does, no moments kept for them
    assert torch.equal(s1["bn.running_mean"], torch.tensor([5.0])) and int(s1["bn.num_batches_tracked"]) == 7
    assert set(server.m) == set(server.v) == {"w"} and s1["w"].dtype == server.v["w"].dtype == torch.float32
    s2 = _round(server, s1, [-1.0, 0.4])
    assert torch.allclose(server.m["w"].double(), torch.tensor([-0.25, 0.15], dtype=torch.float64))
    assert torch.allclose(server.v["w"].double(), v2) and torch.allclose(s2["w"].double(), x2, atol=1e-6)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_checkpointed_moments_resume_bit_for_bit(name: str) -> None:
    x0 = {"w": torch.randn(3, 2), "bn.running_var": torch.ones(2)}
    straight = build_server({"name": name}, 2)
    s1 = _round2(straight, x0, 0)
    buf = io.BytesIO()
    torch.save(straight.state_dict(), buf)
    buf.seek(0)
    resumed = build_server({"name": name}, 2)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    a, b = _round2(straight, s1, 1), _round2(resumed, s1, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(straight.v[k], resumed.v[k]) for k in straight.v)


def _round2(server: FedOpt, x: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    acc = None
    for w in (2.0, 5.0):
        acc = server.accumulate(acc, {k: v + torch.randn(v.shape, generator=g) * 0.1 for k, v in x.items()}, w)
    return server.finalize(x, acc)


def test_no_answer_keeps_the_model_and_the_moments() -> None:
    server = build_server({"name": "fedadam"}, 2)
    x = {"w": torch.ones(2)}
    assert server.finalize(x, None) is x and server.finalize(x, server.accumulate(None, x, 0.0)) is x
    assert server.m == {} and server.v == {}


@pytest.mark.parametrize("option", ["beta1=1.0", "beta2=-0.1", "tau=0", "server_lr=0"])
def test_out_of_range_options_are_user_errors(option: str) -> None:
    key, value = option.split("=")
    with pytest.raises(UserError, match=f"server.{key}"):
        build_server({"name": "fedyogi", key: float(value)}, 2)
    with pytest.raises(UserError, match="server.beta2"):  # FedAdagrad has no second decay
        build_server({"name": "fedadagrad", "beta2": 0.9}, 2)


@pytest.mark.parametrize("method", ["simclr", "byol"])
def test_tiny_run_trains_and_resumes_bit_for_bit(tmp_path: Path, tiny_recipe: Path, method: str) -> None:
    # a small network on 400 samples: the moments are resumed bit for bit or not at any size; the
    # resume after round 1 finds them set (m_1, v_1) and round 2 uses them
    keys = [*FAST, *SMALL_RUN, "server={name: fedadam}",
            f"method={{name: {method}, hidden_dim: 32, output_dim: 16}}"]
    assert main(["fit", "--recipe", str(tiny_recipe), *keys, "rounds=2", f"run.dir={tmp_path / 'a'}"]) == 0
    straight = json.loads((tmp_path / "a/results.json").read_text())
    fit(load_recipe(tiny_recipe, [*keys, "rounds=1", f"run.dir={tmp_path / 'b'}"]))
    resumed = fit(load_recipe(tiny_recipe, [*keys, "rounds=2", f"run.dir={tmp_path / 'b'}"]), resume=True)
    a, b = (torch.load(tmp_path / r / "checkpoints/last.pt", weights_only=True) for r in "ab")
    assert all(torch.equal(a["global"][k], b["global"][k]) for k in a["global"])
    assert set(a["server"]["m"])
    assert all(torch.equal(a["server"]["v"][k], b["server"]["v"][k]) for k in a["server"]["v"])
    strip = lambda h: [{k: v for k, v in row.items() if k not in TIMING} for row in h]  # noqa: E731
    assert strip(straight["history"]) == strip(resumed["history"])
    assert all(0 <= straight["final"][k] <= 1 for k in ("linear_probe_acc", "knn_acc"))
