"""Simulated attackers: who attacks, what each attack sends (hand-computed on tiny tensors), attacks
from other packages, and runs that log and resume them."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fedlight import catalog
from fedlight.attacks.alie import ALIE, z_max
from fedlight.attacks.attack import Attack, AttackContext
from fedlight.attacks.gaussian_noise import GaussianNoise
from fedlight.attacks.ipm import IPM
from fedlight.attacks.label_flip import LabelFlip
from fedlight.attacks.sign_flip import SignFlip
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.loop.aggregation import revised
from fedlight.engine.loop.client_attacks import attackers, poisoned_labels
from fedlight.engine.loop.client_faults import FaultOptions
from fedlight.engine.loop.sampling import sample_clients
from fedlight.engine.parts.faults.simulated_faults import SimulatedFaults
from fedlight.engine.run.fit import check_recipe, fit
from fedlight.errors import UserError
from fedlight.seeding import torch_generator
from fedlight.server.aggregator import ClientPayload
from fedlight.server.fedavg import FedAvg

FAST = ["eval.probe_epochs=1", "eval.knn_k=5", "eval.projector_samples=0", "model.backbone=tiny_cnn"]
GLOBAL = {"w": torch.tensor([1.0, 2.0]), "bn.running_mean": torch.tensor([0.0]),
          "bn.num_batches_tracked": torch.tensor(3)}
SENT = {"w": torch.tensor([1.5, 1.0]), "bn.running_mean": torch.tensor([0.25]),
        "bn.num_batches_tracked": torch.tensor(5)}


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _context(benign: list[dict[str, torch.Tensor]] = (), attackers_: int | None = None) -> AttackContext:
    return AttackContext(GLOBAL, torch.Generator(), list(benign), attackers_, 0, 5)


def _faults(tmp_path: Path, attack: Attack, name: str, seed: int = 7, **options) -> SimulatedFaults:
    """The faults part with every one of clients 4, 5 and 9 attacking, at the start of round 3."""
    faults = SimulatedFaults(FaultOptions(attack=name, attackers=options.pop("attackers", 1.0), **options), seed,
                             tmp_path, clients=[4, 5, 9], attack=attack)
    faults.on_round_start(3, GLOBAL)
    return faults


def test_sign_flip_sends_the_update_reversed_and_scaled_and_leaves_statistics_alone() -> None:
    out = SignFlip(10.0).craft(SENT, _context())
    # update (0.5, -1) -> (-5, 10), sent from the global model (1, 2)
    assert out["w"].tolist() == [-4.0, 12.0]
    assert out["bn.running_mean"] is SENT["bn.running_mean"] and out["bn.num_batches_tracked"].item() == 5


def test_noise_is_drawn_per_seed_round_and_client_and_collusion_is_shared(tmp_path: Path) -> None:
    faults = _faults(tmp_path, GaussianNoise(2.0), "noise")
    noise = faults.damage(SENT, faults.draw(3, 4))["w"]
    z = torch.randn(2, generator=torch_generator(7, "attack", 3, 4))
    assert torch.equal(noise, GLOBAL["w"] + 2.0 * z)  # its own update is gone
    assert not torch.equal(noise, faults.damage(SENT, faults.draw(3, 5))["w"])
    collude = _faults(tmp_path, catalog.ATTACKS["collude"](2.0), "collude")
    a, b = (collude.damage(SENT, collude.draw(3, c))["w"] for c in (4, 9))
    shared = torch.randn(2, generator=torch_generator(7, "collusion", 3))
    assert torch.equal(a, b) and torch.equal(a, GLOBAL["w"] + 2.0 * shared)
    collude.on_round_start(4, GLOBAL)
    assert not torch.equal(a, collude.damage(SENT, collude.draw(4, 4))["w"])  # a new vector each round


def test_attackers_are_a_fixed_set_or_redrawn_each_round() -> None:
    ten = list(range(10))
    fixed = attackers(0.3, ten, 0, None)
    assert len(fixed) == 3 and fixed == attackers(0.3, ten, 0, None) and fixed <= set(ten)
    redrawn = [attackers(0.3, ten, 0, r) for r in range(6)]
    assert len(set(redrawn)) > 1 and all(len(a) == 3 for a in redrawn)
    assert attackers(0.0, ten, 0, None) == frozenset()
    assert attackers(1.0, [2, 5, 9], 0, None) == {2, 5, 9}  # ids of the trainable clients, not positions


def test_an_attack_needs_its_share_and_a_share_its_attack(tiny_recipe: Path) -> None:
    for args in (["faults.attack=noise"], ["faults.attackers=0.5"]):
        with pytest.raises(UserError, match="set both .* or neither"):
            check_recipe(load_recipe(tiny_recipe, args))


def test_attackers_are_logged_and_a_resumed_run_ends_bit_for_bit_where_a_straight_one_does(
        tmp_path: Path, tiny_recipe: Path) -> None:
    attack = ["clients.num=6", "faults.attack=sign_flip", "faults.attackers=0.34", "faults.attackers_per_round=true",
              "faults.attack_scale=3", *FAST]
    run = tmp_path / "straight"
    res = fit(load_recipe(tiny_recipe, [*attack, "rounds=3", f"run.dir={run}"]))
    expected = [f"{r + 1},{c},attacker,sign_flip scale=3" for r in range(3)
                for c in sample_clients(3, r, 6, 1.0) if c in attackers(0.34, list(range(6)), 3, r)]
    assert (run / "faults.csv").read_text().splitlines() == ["round,client,event,detail", *expected]
    assert [row["attackers"] for row in res["history"]] == [2, 2, 2]
    half = tmp_path / "half"
    fit(load_recipe(tiny_recipe, [*attack, "rounds=2", f"run.dir={half}"]))
    fit(load_recipe(tiny_recipe, [*attack, "rounds=3", f"run.dir={half}"]), resume=True)
    assert (half / "faults.csv").read_text() == (run / "faults.csv").read_text()
    a, b = _global(run), _global(half)
    assert all(torch.equal(a[k], b[k]) for k in a)
    clean = tmp_path / "clean"
    fit(load_recipe(tiny_recipe, ["clients.num=6", *FAST, "rounds=3", f"run.dir={clean}"]))
    assert not all(torch.equal(a[k], _global(clean)[k]) for k in a)  # the attack reached the model


def test_label_flipping_relabels_the_attackers_samples_c_minus_1_minus_y() -> None:
    labels = torch.tensor([0, 1, 2, 3, 3])
    parts = [torch.tensor([0, 1]), torch.tensor([2, 3, 4])]
    assert poisoned_labels(labels, parts, frozenset({1}), LabelFlip(), 4).tolist() == [0, 1, 1, 0, 0]
    assert labels.tolist() == [0, 1, 2, 3, 3]  # the data set's own labels stay
    assert LabelFlip().craft(SENT, _context()) is SENT  # it sends what it trained


def test_a_label_flipping_run_logs_its_attackers_and_changes_a_supervised_model(tmp_path: Path,
                                                                              tiny_recipe: Path) -> None:
    args = ["clients.num=4", "method={name: supervised}", "rounds=1", *FAST]
    fit(load_recipe(tiny_recipe, [*args, "faults.attack=labels", "faults.attackers=0.5", f"run.dir={tmp_path / 'a'}"]))
    fit(load_recipe(tiny_recipe, [*args, f"run.dir={tmp_path / 'clean'}"]))
    rows = (tmp_path / "a/faults.csv").read_text().splitlines()[1:]
    assert rows == [f"1,{c},attacker,labels" for c in sorted(attackers(0.5, list(range(4)), 3, None))]
    a, b = _global(tmp_path / "a"), _global(tmp_path / "clean")
    assert not all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(UserError, match="drop faults.attackers_per_round"):
        check_recipe(load_recipe(tiny_recipe, [*args, "faults.attack=labels", "faults.attackers=0.5",
                                               "faults.attackers_per_round=true"]))


@pytest.mark.parametrize("attack, fragment", [
    (["faults.attack=sign_flip", "faults.attackers=0.1"],
     "faults.attackers=0.1 of 2 clients rounds to 0 attackers, so faults.attack=sign_flip would attack nothing; "
     "set faults.attackers to at least 0.5 (1 attacker of 2)"),
    (["faults.attack=labels", "faults.attackers=0.5"],
     "faults.attack=labels poisons the attackers' labels, which method.name=simclr never reads"),
], ids=["no-attacker", "labels-unread"])
def test_an_attack_that_would_do_nothing_is_refused_by_fit_and_by_a_sweep(tmp_path: Path, tiny_recipe: Path, capsys,
                                                                        attack: list[str], fragment: str) -> None:
    """Each would log attackers (or record an attack) that changed nothing the run computes."""
    for args in (["fit", "--recipe", str(tiny_recipe), *attack],
                 ["sweep", "--recipe", str(tiny_recipe), "--out", str(tmp_path / "sweep"), *attack]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and fragment in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
