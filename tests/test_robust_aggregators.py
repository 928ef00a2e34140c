"""The payloads contract and the robust servers: hand-computed rules, checks before training,
and worker models and processes that give the one-process result bit for bit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import cli_process
from fedlight.config import load_recipe
from fedlight.engine.loop.aggregation import check_payload_budget, finish, fold, merge_workers
from fedlight.engine.run.fit import check_recipe, fit, prepare
from fedlight.errors import UserError
from fedlight.server import robust_ops
from fedlight.server.aggregator import ClientPayload
from fedlight.server.bulyan import Bulyan
from fedlight.server.fedavg import FedAvg
from fedlight.server.krum import Krum
from fedlight.server.median import Median, TrimmedMean

REPO = Path(__file__).resolve().parents[1]
FOUR = ["clients.num=4", "model.backbone=tiny_cnn", "eval.projector_samples=0"]


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _payloads(*values: float) -> list[ClientPayload]:
    """One client per value, each sending ``{"w": [value]}`` and ``{"n": value rounded}`` (an int buffer)."""
    return [ClientPayload(c, 1.0 + c, {"w": torch.tensor([float(v)]), "n": torch.tensor(int(v))})
            for c, v in enumerate(values)]


GLOBAL = {"w": torch.tensor([0.0]), "n": torch.tensor(0)}


def test_median_takes_the_middle_value_and_the_mean_of_the_two_middle_ones() -> None:
    assert Median().finalize(GLOBAL, _payloads(1, 5, 2))["w"].item() == 2  # sorted 1 2 5
    out = Median().finalize(GLOBAL, _payloads(1, 4, 2, 10))  # sorted 1 2 4 10: (2 + 4) / 2
    assert out["w"].item() == 3 and out["n"].dtype == torch.int64 and out["n"].item() == 3


def test_median_is_coordinate_wise() -> None:
    states = [ClientPayload(c, 1.0, {"w": torch.tensor(v)}) for c, v in enumerate([[0., 9.], [1., 7.], [5., 8.]])]
    assert Median().finalize({"w": torch.zeros(2)}, states)["w"].tolist() == [1.0, 8.0]


def test_trimmed_mean_drops_floor_trim_n_from_each_side() -> None:
    # n = 4, trim 0.25: drop one each side of 1 2 3 100 -> (2 + 3) / 2; FedAvg's weights are ignored
    assert TrimmedMean(trim=0.25).finalize(GLOBAL, _payloads(1, 100, 2, 3))["w"].item() == 2.5
    # trim 0.2 of 4 clients drops floor(0.8) = 0: the plain mean (1 + 100 + 2 + 3) / 4
    assert TrimmedMean(trim=0.2).finalize(GLOBAL, _payloads(1, 100, 2, 3))["w"].item() == 26.5


def test_krum_scores_sum_the_n_minus_f_minus_2_nearest_squared_distances() -> None:
    # 0 1 2 100, f = 0: two neighbours each. 0: 1 + 4; 1: 1 + 1; 2: 1 + 4; 100: 98^2 + 99^2
    scores = robust_ops.krum_scores(torch.tensor([[0.], [1.], [2.], [100.]], dtype=torch.float64), 0)
    assert scores.tolist() == [5.0, 2.0, 5.0, 9604.0 + 9801.0]
    assert Krum(f=0, m=1).finalize(GLOBAL, _payloads(0, 1, 2, 100))["w"].item() == 1.0
    # Multi-Krum, m = 2: scores 2 then 5 (a tie between clients 0 and 2, to the lower): (1 + 0) / 2
    assert Krum(f=0, m=2).finalize(GLOBAL, _payloads(0, 1, 2, 100))["w"].item() == 0.5


def test_bulyan_selects_by_repeated_krum_then_averages_the_beta_closest_to_the_median() -> None:
    # f = 1, n = 7: theta = 5 picks. n=7 (4 neighbours): 2 scores 1+1+4+4 = 10, the lowest; n=6 (3): 1 and 3
    # tie at 14, the lower; n=5 (2): 3 scores 1 + 9; n=4 (1): 0 and 4 tie at 16; n=3 (1): 4 (9216) ties 100
    values = [0., 1., 2., 3., 4., 100., -100.]
    x = torch.tensor(values, dtype=torch.float64)[:, None]
    assert robust_ops.bulyan_select(x, 1) == [2, 1, 3, 0, 4]
    # beta = theta - 2f = 3 of 0 1 2 6 7 closest to the median 2: 2, 1, 0 -> 1 (the mean is 3.2)
    assert robust_ops.closest_to_median_mean(torch.tensor([0., 1., 2., 6., 7.], dtype=torch.float64), 3) == 1.0
    assert Bulyan(f=1).finalize(GLOBAL, _payloads(*values))["w"].item() == 2.0  # 1 2 3 of 0..4


@pytest.mark.parametrize("server,per_round,message", [
    ("{name: krum, f: 1}", 4, "2f \\+ 3 <= n"), ("{name: krum, f: 0, m: 5}", 4, "m <= n - f"),
    ("{name: bulyan, f: 1}", 6, "4f \\+ 3 = 7"), ("{name: trimmed_mean, trim: 0.2}", 4, "floor\\(0.2 x 4\\) = 0")])
def test_parameters_are_checked_against_the_clients_a_round_samples(tiny_recipe: Path, server: str, per_round: int,
                                                                    message: str) -> None:
    recipe = load_recipe(tiny_recipe, [f"clients.num={per_round}", f"server={server}"])
    with pytest.raises(UserError, match=message):
        check_recipe(recipe)
    check_recipe(load_recipe(tiny_recipe, ["clients.num=8", f"server={server}"]))  # 8 clients are enough for each


def test_a_round_over_the_payload_budget_is_refused_in_one_line() -> None:
    payload = {"w": torch.zeros(2 ** 18)}  # 1 MiB of float32
    check_payload_budget(Median(), payload, 4, 4, "median")
    with pytest.raises(UserError, match="5 clients x 1.0 MiB = 5.0 MiB, over run.payload_budget_mb=4"):
        check_payload_budget(Median(), payload, 5, 4, "median")
    check_payload_budget(FedAvg(), payload, 5, 4, "fedavg")  # a sum holds one accumulator only


def test_kept_payloads_are_cpu_copies_merged_by_client() -> None:
    w = torch.ones(2)
    acc = fold(Median(), None, 3, 2.0, {"w": w})
    w.add_(1)  # the worker model trains on
    merged = merge_workers(Median(), [fold(Median(), None, 5, 1.0, {"w": w}), None, acc])
    assert sorted(merged) == [3, 5] and merged[3][1]["w"].tolist() == [1.0, 1.0] and merged[3][0] == 2.0
    assert merge_workers(Median(), [None, None]) is None


def test_finalize_receives_the_payloads_in_client_order() -> None:
    seen = []

    class Spy(Median):
        def finalize(self, global_state, payloads):
            seen.extend(payloads)
            return global_state

    acc = {7: (1.0, {"w": torch.ones(1)}), 2: (3.0, {"w": torch.zeros(1)})}
    finish(type("OneRank", (), {"world_size": 1})(), Spy(), GLOBAL, acc, neutral=dict)
    assert [(p.client, p.weight) for p in seen] == [(2, 3.0), (7, 1.0)]


def test_a_payloads_server_runs_with_two_workers_and_two_processes_as_with_one(tmp_path: Path,
                                                                               tiny_recipe: Path) -> None:
    args = [*FOUR, "server={name: trimmed_mean, trim: 0.25}", "fabric.threads=1"]
    fit(load_recipe(tiny_recipe, [*args, f"run.dir={tmp_path / 'one'}"]))
    fit(load_recipe(tiny_recipe, [*args, "fabric.workers=2", f"run.dir={tmp_path / 'workers'}"]))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = cli_process.run(["fit", "--recipe", str(tiny_recipe), *args, "fabric.devices=2",
                            f"run.dir={tmp_path / 'ranks'}"], env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    one = _global(tmp_path / "one")
    for other in ("workers", "ranks"):  # the same payloads in the same order: the same bits
        two = _global(tmp_path / other)
        assert all(torch.equal(one[k], two[k]) for k in one), other
    assert not all(torch.equal(one[k], _global_fedavg(tmp_path, tiny_recipe)[k]) for k in one)


def _global_fedavg(tmp_path: Path, tiny_recipe: Path) -> dict[str, torch.Tensor]:
    """The same run under FedAvg: the trimmed mean must not be a mean in disguise."""
    fit(load_recipe(tiny_recipe, [*FOUR, "fabric.threads=1", f"run.dir={tmp_path / 'fedavg'}"]))
    return _global(tmp_path / "fedavg")


def test_fit_refuses_a_round_over_the_budget_before_anything_is_written(tmp_path: Path, tiny_recipe: Path,
                                                                        capsys) -> None:
    from fedlight.cli import main

    run = tmp_path / "over"
    assert main(["fit", "--recipe", str(tiny_recipe), "server.name=median", "clients.num=4",
                 "run.payload_budget_mb=1", f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4 clients x" in err[0] and "run.payload_budget_mb=1" in err[0], err
    assert not run.exists()
    half = ["server.name=median", "clients.num=4", "clients.fraction=0.5", "run.payload_budget_mb=1"]
    prepare(load_recipe(tiny_recipe, [*half, "clients.sampling=fixed"]))  # 2 clients a round fit in 1 MiB
    with pytest.raises(UserError, match="4 clients x"):  # a Poisson round may draw all 4
        prepare(load_recipe(tiny_recipe, [*half, "clients.sampling=poisson"]))
