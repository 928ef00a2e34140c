"""Simulated attackers: who attacks, what each attack sends (hand-computed on tiny tensors), attacks
from other packages, and runs that log and resume them."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import QUICK_EVAL, SMALL_RUN
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
from fedlight.server.fedavg import FedAvg

# runs whose point is who attacks, what is logged and resumed: a small network on 400 samples
FAST = [*QUICK_EVAL, *SMALL_RUN]
GLOBAL = {"w": torch.tensor([1.0, 2.0]), "bn.running_mean": torch.tensor([0.0]),
          "bn.num_batches_tracked": torch.tensor(3)}
SENT = {"w": torch.tensor([1.5, 1.0]), "bn.running_mean": torch.tensor([0.25]),
        "bn.num_batches_tracked": torch.tensor(5)}


def _global(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints/last.pt", weights_only=True)["global"]


def _context(benign: list[dict[str, torch.Tensor]] = (), attackers_: int | None = None) -> AttackContext:
    return AttackContext(GLOBAL, torch.Generator(), list(benign), attackers_, 0, 5)


def _faults(tmp_path: Path, attack: Attack, name: str, seed: int = 7, **options: float) -> SimulatedFaults:
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
    res = fit(load_recipe(tiny_recipe, [*attack, "rounds=2", f"run.dir={run}"]))
    expected = [f"{r + 1},{c},attacker,sign_flip scale=3" for r in range(2)
                for c in sample_clients(3, r, 6, 1.0) if c in attackers(0.34, list(range(6)), 3, r)]
    assert (run / "faults.csv").read_text().splitlines() == ["round,client,event,detail", *expected]
    assert [row["attackers"] for row in res["history"]] == [2, 2]
    drawn = [[row.split(",")[1] for row in expected if row.startswith(f"{r},")] for r in (1, 2)]
    assert drawn[0] != drawn[1]  # round 2 re-drew them: the resumed run below has to draw as the straight one
    half = tmp_path / "half"  # stopped after round 1: round 2's attackers are drawn by the resumed run
    fit(load_recipe(tiny_recipe, [*attack, "rounds=1", f"run.dir={half}"]))
    fit(load_recipe(tiny_recipe, [*attack, "rounds=2", f"run.dir={half}"]), resume=True)
    assert (half / "faults.csv").read_text() == (run / "faults.csv").read_text()
    a, b = _global(run), _global(half)
    assert all(torch.equal(a[k], b[k]) for k in a)
    clean = tmp_path / "clean"
    fit(load_recipe(tiny_recipe, ["clients.num=6", *FAST, "rounds=2", f"run.dir={clean}"]))
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


def _payload(w: list[float]) -> dict[str, torch.Tensor]:
    """A client's upload whose learnable ``w`` is ``w`` (its BatchNorm statistics as ``SENT``'s)."""
    return {**SENT, "w": torch.tensor(w)}


# benign payloads of w from the global model's (1, 2): updates (0, 1), (2, 1), (4, 1): mean (2, 1), sample std (2, 0)
BENIGN = [_payload([1.0, 3.0]), _payload([3.0, 3.0]), _payload([5.0, 3.0])]


def test_alie_sends_the_benign_mean_less_z_standard_deviations() -> None:
    out = ALIE(z=1.5).craft(SENT, _context(BENIGN, 1))
    assert out["w"].tolist() == [0.0, 3.0]  # (1, 2) + (2 - 1.5 x 2, 1 - 1.5 x 0)
    assert out["bn.running_mean"] is SENT["bn.running_mean"]  # statistics sent as trained
    # z_max: n = 4 clients, f = 1 attacker: s = floor(3) - 1 = 2, Phi^-1((4 - 2) / 4) = 0: the benign mean itself
    assert ALIE().craft(SENT, _context(BENIGN, 1))["w"].tolist() == [3.0, 3.0]
    assert ALIE(z=1.5).craft(SENT, _context(BENIGN[:1], 1))["w"].tolist() == [1.0, 3.0]  # one benign: sigma 0
    assert ALIE().craft(SENT, _context([], 2)) is SENT  # nobody to hide among: its own payload


def test_alie_z_max_is_the_papers_formula() -> None:
    # Phi^-1 from a normal table: n = 50, f = 24: s = 26 - 24 = 2, Phi^-1(0.96) = 1.7507; n = 10, f = 2:
    # s = 6 - 2 = 4, Phi^-1(0.6) = 0.2533; attackers a majority (n = 3, f = 2: s = 0) count s = 1: Phi^-1(2 / 3) = 0.4307
    assert [round(z_max(n, f), 4) for n, f in ((50, 24), (10, 2), (3, 2))] == [1.7507, 0.2533, 0.4307]


def test_ipm_sends_the_benign_mean_reversed_and_scaled() -> None:
    assert IPM(epsilon=0.5).craft(SENT, _context(BENIGN, 1))["w"].tolist() == [0.0, 1.5]  # (1, 2) - 0.5 x (2, 1)
    assert IPM().craft(SENT, _context(BENIGN, 1))["w"].tolist() == pytest.approx([0.8, 1.9])  # epsilon 0.1
    assert IPM().craft(SENT, _context([], 1)) is SENT


@pytest.mark.parametrize("epsilon", [0.5, 100.0])
def test_omniscient_attackers_craft_once_the_round_has_trained_and_are_checked_like_any_upload(
        tmp_path: Path, epsilon: float) -> None:
    """The round's kept payloads, revised (``aggregation.revised``) and folded into FedAvg's sum: an
    IPM attacker sends (1, 2) - epsilon x the benign mean update (2, -1); at epsilon 100 its upload's
    norm (224) is over faults.max_update_ratio=10 times the global model's (2.24): it is excluded."""
    global_state = {"w": torch.tensor([1.0, 2.0])}
    faults = _faults(tmp_path, IPM(epsilon), "ipm", attackers=1 / 3, max_update_ratio=10.0)
    faults.on_round_start(3, global_state)
    (attacker,) = faults.attackers(3)
    benign = iter([[2.0, 2.0], [4.0, 0.0]])  # updates (1, 0) and (3, -2)
    honest = {c: {"w": torch.tensor([9.0, 9.0] if c == attacker else next(benign))} for c in (4, 5, 9)}
    reports = [{"client": c, "status": "ok", "loss": 0.5, "update_norm": 0.0} for c in (4, 5, 9)]
    acc = revised(SimpleNamespace(world_size=1), FedAvg(), faults, 3, global_state,
                  {c: (1.0, p) for c, p in honest.items()}, reports)
    new = FedAvg().finalize(global_state, acc)["w"]
    (report,) = [rep for rep in reports if rep["client"] == attacker]
    assert honest[attacker]["w"].tolist() == [9.0, 9.0]  # its honest payload is not changed in place
    if epsilon == 0.5:  # ((2, 2) + (4, 0) + (0, 2.5)) / 3
        assert new.tolist() == pytest.approx([2.0, 1.5]) and report["status"] == "ok"
        assert report["update_norm"] == pytest.approx(1.25 ** 0.5)  # of what it sent: (0, 2.5) - (1, 2)
    else:  # the benign mean alone
        assert new.tolist() == pytest.approx([3.0, 1.0])
        assert report["status"] == "diverged" and report["detail"].startswith("update norm 224")


def test_an_attack_that_sees_the_benign_payloads_keeps_them_within_the_payload_budget() -> None:
    from fedlight.engine.loop.aggregation import check_payload_budget

    payload = {"w": torch.zeros(2 ** 18)}  # 1 MiB
    check_payload_budget(FedAvg(), payload, 5, 4, "fedavg")  # a sum: nothing kept
    with pytest.raises(UserError, match=r"^faults.attack=alie keeps every client's payload of a round: 5 clients"):
        check_payload_budget(FedAvg(), payload, 5, 4, "fedavg", "alie")


def test_attack_options_are_checked_before_any_data(tiny_recipe: Path) -> None:
    cases = {("faults.attack_options.zz=1",): "unknown recipe key 'faults.attack_options.zz' for faults.attack=alie; "
                                              "valid keys: faults.attack_options.z",
             ("faults.attack_options.z=-1",): "recipe key 'faults.attack_options.z' must be >= 0",
             ("faults.attack_options.scale=1",): "faults.attack_options.scale: its scale is faults.attack_scale",
             ("faults.attack=none", "faults.attackers=0", "faults.attack_options.z=1"):
                 "faults.attack_options are the options of faults.attack, which is none"}
    for args, message in cases.items():
        with pytest.raises(UserError, match=re.escape(message)):
            check_recipe(load_recipe(tiny_recipe, ["faults.attack=alie", "faults.attackers=0.5",
                                                   "data.root=/nonexistent", *args]))


@pytest.mark.parametrize("attack, server, detail", [
    (["faults.attack=alie", "faults.attack_options.z=1"], "fedavg", "alie z=1"),
    (["faults.attack=ipm", "faults.attack_options.epsilon=100"], "median", "ipm epsilon=100"),
], ids=["alie-fedavg", "ipm-median"])
def test_omniscient_attackers_are_resumed_bit_for_bit(tmp_path: Path, tiny_recipe: Path, attack: list[str],
                                                      server: str, detail: str) -> None:
    """ALIE on the sum contract, IPM on the payloads contract: the round keeps every payload and the
    attackers (re-drawn each round) craft theirs from the benign ones; a run stopped after round 1 and
    resumed ends on the straight run's model and faults.csv, bit for bit."""
    args = ["clients.num=4", *attack, "faults.attackers=0.25", "faults.attackers_per_round=true",
            f"server.name={server}", *FAST]
    run, half = tmp_path / "straight", tmp_path / "half"
    res = fit(load_recipe(tiny_recipe, [*args, "rounds=2", f"run.dir={run}"]))
    expected = [f"{r + 1},{c},attacker,{detail}" for r in range(2) for c in sorted(attackers(0.25, list(range(4)), 3, r))]
    assert (run / "faults.csv").read_text().splitlines() == ["round,client,event,detail", *expected]
    assert [row["attackers"] for row in res["history"]] == [1, 1]
    option, value = detail.split()[1].split("=")
    assert res["recipe"]["resolved"]["attack"] == {"name": detail.split()[0], option: float(value)}
    fit(load_recipe(tiny_recipe, [*args, "rounds=1", f"run.dir={half}"]))
    if "ipm" in detail:  # an attack option is the experiment: refused where the record says otherwise
        with pytest.raises(UserError, match=r"faults.attack_options.epsilon=100.0 \(resolved"):
            fit(load_recipe(tiny_recipe, [*args, "faults.attack_options.epsilon=1", "rounds=2",
                                          f"run.dir={half}"]), resume=True)
    fit(load_recipe(tiny_recipe, [*args, "rounds=2", f"run.dir={half}"]), resume=True)
    assert (half / "faults.csv").read_text() == (run / "faults.csv").read_text()
    a, b = _global(run), _global(half)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_every_builtin_attack_is_an_attack_listed_with_its_docstring() -> None:
    for name in list(catalog.ATTACKS.builtins):
        cls = catalog.ATTACKS[name]
        assert isinstance(cls, type) and issubclass(cls, Attack), name
        doc = " ".join(line.strip() for line in cls.__doc__.strip().split("\n\n")[0].splitlines())
        assert catalog.ATTACKS.description(name) == doc and doc, name
    listed = catalog.describe_all()
    assert re.search(r"^attacks \(fedlight\.attacks\):\n(  \S.*\n)*  alie +A Little Is Enough", listed, re.M)


ATTACK_DOC = Path(__file__).resolve().parents[1] / "docs" / "attacks.md"


def test_the_docs_attack_from_another_package_trains_through_fedlight_fit(tmp_path: Path, tiny_recipe: Path,
                                                                         monkeypatch, capsys) -> None:
    """docs/attacks.md's mimic attack, installed as a package with an entry point ``fedlight.attacks``:
    listed, its options checked, and two rounds trained with it (the attacker's upload a copy of a
    benign client's, so the run ends where one without it does only by chance)."""
    from tests.test_extensions import install

    text = ATTACK_DOC.read_text()
    code = re.search(r"```python\n(.*?)```", text[text.index("<!-- write-your-own-attack"):], re.S).group(1)
    entry = re.search(r'\[project\.entry-points\."fedlight\.attacks"\]\n(\w+) = "(\S+)"', text)
    name, target = entry.groups()
    package, module = target.split(":")[0].split(".")
    install(tmp_path / "site", package, {f"{module}.py": code}, f"[fedlight.attacks]\n{name} = {target}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(catalog.ATTACKS, "_found", None)  # look for entry points again, with the package

    assert re.search(rf"^  {name} +Every attacker sends a copy .*\[{re.escape(target)}\]$", catalog.describe_all(), re.M)
    assert main(["fit", "--recipe", str(tiny_recipe), "faults.attack=mimc", "faults.attackers=0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unknown faults.attack 'mimc'; valid names: none, alie, collude, ipm, labels, " \
                                   f"{name}, noise, sign_flip" in err, err
    args = ["clients.num=3", f"faults.attack={name}", "faults.attackers=0.34", *FAST]
    with pytest.raises(UserError, match=r"faults.attack_options.target' must be >= 0"):
        check_recipe(load_recipe(tiny_recipe, [*args, "faults.attack_options.target=-1"]))
    res = fit(load_recipe(tiny_recipe, [*args, "faults.attack_options.target=1", "rounds=2"]))
    (attacker,) = attackers(0.34, [0, 1, 2], 3, None)
    assert (tmp_path / "run/faults.csv").read_text().splitlines()[1:] == [
        f"{r},{attacker},attacker,{name} target=1" for r in (1, 2)]
    assert res["recipe"]["resolved"]["attack"] == {"name": name, "target": 1}
    assert [row["attackers"] for row in res["history"]] == [1, 1] and res["final"]["knn_acc"] is not None
