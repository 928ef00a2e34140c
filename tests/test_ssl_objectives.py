"""The six SSL objectives added through the public surface (SimSiam, MoCo, Barlow Twins, VICReg, SwAV,
DINO): each imports only ``fedlight``'s public names, trains through the engine and resumes bit for
bit, is listed and has its config group file; FedU and FedEMA take the objectives they fit and refuse
the others in one line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import fedlight
from fedlight import registry
from fedlight.catalog import describe_all
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.config.groups import Choice, options
from fedlight.engine.run.fit import fit
from fedlight.methods.dino import DINO
from fedlight.methods.fedema import FedEMA
from fedlight.methods.federated_module import OptimizerSpec
from fedlight.methods.moco import MoCo
from fedlight.models.backbones import SmallCNN

PKG = Path(fedlight.__file__).resolve().parent
NEW = {"simsiam": "simsiam.py", "moco": "moco.py", "barlow_twins": "barlow_twins.py", "vicreg": "vicreg.py",
       "swav": "swav.py", "dino": "dino.py"}
SMALL = {  # CPU-test widths; every other option is the class default
    "simsiam": "hidden_dim: 32, output_dim: 32, predictor_hidden_dim: 8",
    "moco": "hidden_dim: 32, output_dim: 16, queue_size: 64",
    "barlow_twins": "hidden_dim: 32, output_dim: 32",
    "vicreg": "hidden_dim: 32, output_dim: 32",
    "swav": "hidden_dim: 32, output_dim: 16, n_prototypes: 10",
    "dino": "hidden_dim: 32, bottleneck_dim: 8, output_dim: 64",
}
RUNS = {name: f"{{name: {name}, {small}}}" for name, small in SMALL.items()} | {
    "fedu+simsiam": f"{{name: fedu, objective: simsiam, {SMALL['simsiam']}}}",
    "fedema+moco": f"{{name: fedema, objective: moco, {SMALL['moco']}}}",
    "fedema+dino": f"{{name: fedema, objective: dino, {SMALL['dino']}}}",
}
# what each run's clients keep between rounds besides FedU's / FedEMA's own copy
PRIVATE = {"moco": "criterion.memory_bank.bank", "dino": "criterion.center", "fedu+simsiam": "local.valid",
           "fedema+moco": "objective.criterion.memory_bank.bank_ptr", "fedema+dino": "objective.backbone_momentum."}
TINY_RUN = ["data.subset=120", "local.batch_size=32", "clients.num=3", "clients.fraction=0.67",
            "eval.probe_epochs=1", "eval.projector_samples=0"]


@pytest.mark.parametrize("file", NEW.values())
def test_each_objective_imports_only_fedlights_public_surface(file: str) -> None:
    """The contract's proof: built as an outside package builds a method (``from fedlight import``
    public names, torch and lightly), registered by ``module:attr`` as an entry point names one."""
    tree = ast.parse((PKG / "methods" / file).read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m.split(".")[0] for m in modules} <= {"__future__", "typing", "copy", "torch", "lightly", "fedlight"}
    assert "fedlight" in modules and not any(m.startswith("fedlight.") for m in modules)
    public = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "fedlight" for a in n.names}
    assert public <= set(fedlight.__all__)


@pytest.mark.parametrize("run", RUNS)
def test_trains_through_the_engine_and_resumes_bit_for_bit(tmp_path: Path, tiny_recipe: Path, run: str) -> None:
    """Two rounds, the second after a resume: the loss is finite, the second round changes the
    encoder and the heads, and where clients keep state it persists: the resumed run ends where an
    unbroken one ends (the stateless objectives' resume needs no more than the engine's own tests)."""
    args = [f"method={RUNS[run]}", *TINY_RUN]
    fit(load_recipe(tiny_recipe, [*args, "rounds=1", f"run.dir={tmp_path / 'b'}"]))
    after_one = torch.load(tmp_path / "b/checkpoints/last.pt", weights_only=True)["global"]
    resumed = fit(load_recipe(tiny_recipe, [*args, "rounds=2", f"run.dir={tmp_path / 'b'}"]), resume=True)
    assert all(torch.isfinite(torch.tensor(row["train_loss"])) for row in resumed["history"])
    ckpt = torch.load(tmp_path / "b/checkpoints/last.pt", weights_only=True)
    changed = [k for k, v in ckpt["global"].items() if v.is_floating_point() and not torch.equal(v, after_one[k])]
    assert any("backbone." in k for k in changed) and any("head" in k for k in changed)
    if run in PRIVATE:  # the queue, teacher, centre or local copy persists through the client store
        assert any(k.startswith(PRIVATE[run]) for state in ckpt["clients"].values() for k in state)
        straight = fit(load_recipe(tiny_recipe, [*args, "rounds=2", f"run.dir={tmp_path / 'a'}"]))
        assert straight["final"] == resumed["final"]


@pytest.mark.parametrize("method,objective,named", [
    ("fedu", "simclr", "method.objective=byol or simsiam"), ("fedu", "moco", "MoCo has none"),
    ("fedema", "simsiam", "method.objective=byol, moco or dino"), ("fedema", "swav", "SwAV has none")])
def test_fedu_and_fedema_refuse_an_objective_they_do_not_fit_in_one_line(tiny_recipe: Path, capsys, method: str,
                                                                         objective: str, named: str) -> None:
    assert main(["fit", "--recipe", str(tiny_recipe), f"method={{name: {method}, objective: {objective}}}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedlight: error: ") and named in err, err
    assert not (tiny_recipe.parent / "run").exists()


def test_fedema_over_moco_merges_the_query_encoder_and_leaves_key_encoder_and_queue() -> None:
    m = FedEMA(MoCo(SmallCNN(1, (2, 2, 2)), hidden_dim=8, output_dim=4, queue_size=6), tau=0.5)
    m.reset_private_state()
    m.on_train_end()  # the local copy = the model now
    moco = m.objective
    with torch.no_grad():  # the "global" query encoder moves away; the key encoder and queue are the client's
        for p in (*moco.backbone.parameters(), *moco.projection_head.parameters()):
            p.add_(1.0)
        moco.criterion.memory_bank.bank_ptr.fill_(3)
    key, queue = [t.clone() for t in moco.backbone_momentum.parameters()], moco.criterion.memory_bank.bank.clone()
    local = next(m.local.projection_head.parameters()).clone()
    m.on_train_start()
    assert torch.allclose(next(moco.projection_head.parameters()), local + 0.5, atol=1e-6)  # 0.5 l + 0.5 (l + 1)
    assert all(torch.equal(a, b) for a, b in zip(moco.backbone_momentum.parameters(), key))
    assert torch.equal(moco.criterion.memory_bank.bank, queue) and int(moco.criterion.memory_bank.bank_ptr) == 3


def test_moco_queue_is_private_state_seeded_at_reset_and_filled_by_the_keys() -> None:
    m = MoCo(SmallCNN(1), hidden_dim=8, output_dim=4, queue_size=10)
    assert {"criterion.memory_bank.bank", "criterion.memory_bank.bank_ptr"} <= set(m.private_state())
    m.reset_private_state()
    first = m.criterion.memory_bank.bank.clone()
    assert torch.allclose(first.norm(dim=1), torch.ones(10))
    batch = ([torch.randn(6, 1, 12, 12), torch.randn(6, 1, 12, 12)], torch.zeros(6))
    m.training_step(batch, 0).backward()
    assert int(m.criterion.memory_bank.bank_ptr) == 6 and torch.equal(m.criterion.memory_bank.bank[6:], first[6:])
    with torch.no_grad():
        keys = torch.nn.functional.normalize(m.projection_head_momentum(m.backbone_momentum(batch[0][1])), dim=1)
    assert torch.allclose(m.criterion.memory_bank.bank[:6], keys, atol=1e-6)
    m.reset_private_state()  # a new client: the same seeded queue, from the start
    assert torch.equal(m.criterion.memory_bank.bank, first) and int(m.criterion.memory_bank.bank_ptr) == 0


def test_dino_center_is_private_and_a_new_client_starts_it_at_zero() -> None:
    m = DINO(SmallCNN(1), hidden_dim=8, bottleneck_dim=4, output_dim=16)
    m.training_step(([torch.randn(6, 1, 12, 12), torch.randn(6, 1, 12, 12)], torch.zeros(6)), 0)
    assert "criterion.center" in m.private_state() and m.criterion.center.abs().sum() > 0
    m.reset_private_state()
    assert m.criterion.center.abs().sum() == 0


def test_each_objective_is_listed_with_a_description() -> None:
    lines = {line.split()[0]: line for line in describe_all().splitlines() if line.startswith("  ")}
    for name in NEW:
        assert len(lines[name].split()) > 4 and "[" not in lines[name], lines[name]  # built in, described


@pytest.mark.parametrize("name", sorted(options("method")))
def test_every_method_config_group_file_builds_its_method(name: str) -> None:
    """``configs/method/<name>.yaml`` (paper defaults) names keys the method takes, in range: built
    on the meta device (no memory), all of its state declared."""
    section = Choice("method", name).section()
    assert NEW.keys() <= set(options("method"))
    with torch.device("meta"):
        module = registry.build_method(section, "small_cnn", 3, 32, 10, OptimizerSpec())
    registry.check_declared(module)
