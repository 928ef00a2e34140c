"""fabric.workers: worker models that train a round's clients side by side in threads."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from fedlight.config import load_recipe
from fedlight.engine.loop.local_loop import train_client
from fedlight.engine.loop import preemption
from fedlight.engine.loop.preemption import Preempted
from fedlight.engine.loop.workers import Workers, sum_states
from fedlight.engine.parts.fedavg import epoch_schedule as epochs
from fedlight.engine.run.fit import check_recipe, fit
from fedlight.errors import UserError
from fedlight.methods.federated_module import OptimizerSpec

FOUR = ["clients.num=4", "model.backbone=tiny_cnn", "eval.projector_samples=0"]


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:  # the same arithmetic; only the float64 sum's order differs
        assert torch.allclose(a[k].double(), b[k].double(), atol=1e-6, rtol=1e-5), k


def test_sum_states_adds_key_wise_and_skips_workers_that_trained_nobody() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3.0)}
    b = {"w": torch.tensor([0.5, -1.0]), "n": torch.tensor(1.0)}
    total = sum_states([None, a, b, None])
    assert torch.equal(total["w"], torch.tensor([1.5, 1.0])) and float(total["n"]) == 4.0
    assert torch.equal(a["w"], torch.tensor([1.0, 2.0]))  # the inputs are left alone
    assert sum_states([None, None]) is None and torch.equal(sum_states([a])["w"], a["w"])


def test_workers_train_in_parallel_threads_on_their_own_models() -> None:
    module = torch.nn.Linear(2, 2)
    workers = Workers(module, count=2, threads=2)
    both_inside = threading.Barrier(2, timeout=30)  # breaks (and raises) unless both run at once
    main_threads = torch.get_num_threads()

    def job(m: torch.nn.Module, tag: str) -> tuple:
        both_inside.wait()
        return tag, m, torch.get_num_threads(), threading.current_thread() is threading.main_thread()

    try:
        out = workers.map(job, ["a", "b"])
    finally:
        workers.close()
    assert [o[0] for o in out] == ["a", "b"]  # results in worker order
    assert out[0][1] is module and out[1][1] is not module  # worker 0 is the process's model
    assert torch.equal(out[1][1].weight, module.weight)  # a copy of it
    assert [o[2] for o in out] == [1, 1] and not any(o[3] for o in out)  # one intra-op thread each
    assert torch.get_num_threads() == main_threads  # evaluation on the calling thread keeps them all


def test_one_worker_runs_in_the_calling_thread_and_a_failing_worker_raises() -> None:
    one = Workers(torch.nn.Linear(1, 1), count=1, threads=2)
    assert one.map(lambda m, j: threading.current_thread() is threading.main_thread(), [0]) == [True]
    two = Workers(torch.nn.Linear(1, 1), count=2, threads=2)
    finished = []

    def job(m: torch.nn.Module, j: int) -> None:
        if j == 0:
            raise RuntimeError("worker 0 failed")
        finished.append(j)

    with pytest.raises(RuntimeError, match="worker 0 failed"):
        two.map(job, [0, 1])
    two.close()
    assert finished == [1]  # the other worker ran to its end before the error surfaced


@pytest.mark.parametrize("method", ["simclr", "byol"])  # byol: private state in the store, written by two threads
def test_two_workers_match_one(tmp_path: Path, tiny_recipe: Path, method: str, monkeypatch) -> None:
    monkeypatch.setenv("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # as Lightning's import leaves it
    runs = {}
    for workers, threads in ((1, 1), (2, 2)):  # one intra-op thread per client either way
        run = tmp_path / f"w{workers}"
        runs[workers] = fit(load_recipe(tiny_recipe, [*FOUR, f"method.name={method}", f"fabric.workers={workers}",
                                                      f"fabric.threads={threads}", f"run.dir={run}"]))
    _close(_global(tmp_path / "w1"), _global(tmp_path / "w2"))
    one, two = runs[1], runs[2]
    assert one["comm"] == two["comm"]
    assert [h["clients"] for h in one["history"]] == [h["clients"] for h in two["history"]]
    for a, b in zip(one["history"], two["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-4)
    if method == "byol":
        stores = [torch.load(tmp_path / f"w{w}/checkpoints/last.pt", weights_only=True)["clients"] for w in (1, 2)]
        assert sorted(stores[0]) == sorted(stores[1]) == [0, 1, 2, 3]
        for c in stores[0]:
            _close(stores[0][c], stores[1][c])
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ  # fit drops Lightning's per-call NVML probe


def test_two_workers_do_not_depend_on_thread_timing(tmp_path: Path, tiny_recipe: Path) -> None:
    for name in ("a", "b"):
        fit(load_recipe(tiny_recipe, [*FOUR, "fabric.workers=2", f"run.dir={tmp_path / name}"]))
    a, b = _global(tmp_path / "a"), _global(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("server", ["{name: flesd}", "{name: fedavg}"])
def test_servers_that_share_the_one_model_refuse_workers(tiny_recipe: Path, server: str) -> None:
    overrides = [*FOUR, "fabric.workers=2", f"server={server}"]
    if "flesd" in server:
        overrides.append("partition.public_client=3")
    else:  # CF-CL's schedule: its devices share one model's embeddings of the exchange
        overrides.append("local.iterations=2")
    with pytest.raises(UserError, match="fabric.workers=2 .* set fabric.workers=1"):
        check_recipe(load_recipe(tiny_recipe, overrides))


@pytest.mark.parametrize("server", ["fedavg", "median"])  # the sum contract, and the payloads one
def test_sigterm_stops_both_workers_between_clients_and_resume_ends_where_a_straight_run_ends(
        tmp_path: Path, tiny_recipe: Path, monkeypatch, server: str) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    args = [*FOUR, "clients.num=6", "rounds=2", "fabric.workers=2", f"server.name={server}"]
    fit(load_recipe(tiny_recipe, [*args, f"run.dir={tmp_path / 'straight'}"]))
    calls, counting = [], threading.Lock()

    def train_then_signal(*a, **kw):  # SIGTERM while the second round's first clients train
        with counting:  # each call its own number: both workers' threads call it (unlocked, two could skip 8)
            calls.append(1)
            nth = len(calls)
        if nth == 8:
            os.kill(os.getpid(), signal.SIGTERM)
            # Python runs the handler in the main thread, later: had the other worker passed its last check
            # between clients first, with this one on its last client, round 2 (the last) would end unstopped.
            # Known gap (engine/loop/workers.py): the main thread waits for the workers in an untimed
            # concurrent.futures.wait, which the signal does not always wake, so the handler can wait for the
            # round's end (~1 run in 6 under load); waiting with a timeout in a loop fixes it (14 of 14)
            deadline = time.monotonic() + 10
            while not preemption.received() and time.monotonic() < deadline:
                time.sleep(0.001)
        return train_client(*a, **kw)

    monkeypatch.setattr(epochs, "train_client", train_then_signal)
    run = tmp_path / "stopped"
    with pytest.raises(Preempted) as stop:
        fit(load_recipe(tiny_recipe, [*args, f"run.dir={run}"]))
    assert stop.value.rounds_done == 1 and 2 <= stop.value.clients_done < 6  # each worker stops after its client
    monkeypatch.undo()
    fit(load_recipe(tiny_recipe, [*args, f"run.dir={run}"]), resume=True)
    straight, resumed = _global(tmp_path / "straight"), _global(run)
    if server == "median":  # the round's kept payloads were checkpointed and resumed: bit for bit
        assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    else:
        _close(straight, resumed)


def test_optimizers_are_fused_on_the_cpu_and_step_like_torchs_default() -> None:
    for name in ("adam", "adamw", "sgd"):
        weights = [torch.nn.Parameter(torch.randn(5, 3, generator=torch.Generator().manual_seed(i))) for i in range(2)]
        twins = [torch.nn.Parameter(w.detach().clone()) for w in weights]
        spec = OptimizerSpec(name, lr=0.01, weight_decay=0.1)
        fused = spec.build(weights)
        assert fused.defaults["fused"] is True
        extra = {"momentum": spec.momentum} if name == "sgd" else {}
        plain = type(fused)(twins, lr=0.01, weight_decay=0.1, **extra)  # torch's default: tensor by tensor
        assert not plain.defaults.get("fused")
        for step in range(3):
            for w, t in zip(weights, twins):
                w.grad = t.grad = torch.full_like(w, 0.1 * (step + 1)) + w.detach()
            fused.step(), plain.step()
        assert all(torch.allclose(w, t, atol=1e-6) for w, t in zip(weights, twins)), name
