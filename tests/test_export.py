"""``fedlight export RUN_DIR`` and ``fedlight.load_encoder``: a run's encoder taken away and rebuilt without its recipe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fedlight
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.run.encoder_export import _recorded_inputs, export_encoder
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.invocation import fedlight_command

REPO = Path(__file__).resolve().parents[1]
FMNIST = Path("/usr/share/datasets/fashion-mnist")
SEED, SUBSET, TEST_SUBSET, LABELS, K = 3, 600, 300, 0.1, 20

# a fresh process: the export file and the evaluator's protocol (seeded labelled subset, k, temperature), no recipe
FRESH_KNN = f"""
import sys, torch, fedlight
from fedlight.data.sources import load_dataset, take_subset
from fedlight.eval.probes import knn_accuracy, label_subset
from fedlight.seeding import numpy_rng
encoder = fedlight.load_encoder(sys.argv[1])
data = take_subset(load_dataset("fashion_mnist", "{FMNIST}", False, {SEED}), {SUBSET}, {TEST_SUBSET}, {SEED})
idx = torch.as_tensor(label_subset(data.train_y.numpy(), {LABELS}, numpy_rng({SEED}, "label-fraction")))
with torch.no_grad():
    feats = lambda x: torch.cat([encoder(x[i:i + 256]) for i in range(0, len(x), 256)])
    print(knn_accuracy(feats(data.train_x[idx]), data.train_y[idx], feats(data.test_x), data.test_y, 10, {K}, 0.1))
"""


def _recipe(tmp: Path, run: Path, *overrides: str) -> Path:
    from conftest import TINY

    path = tmp / "tiny.yaml"
    path.write_text(TINY.format(repo=REPO) + f"run: {{dir: {run}}}\n")
    fit(load_recipe(path, list(overrides)))
    return run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    return _recipe(tmp, tmp / "run", "rounds=1")


@pytest.mark.skipif(not FMNIST.is_dir(), reason="needs Debian's dataset-fashion-mnist (scripts/setup.sh)")
def test_exported_encoder_gives_the_runs_final_knn_in_a_fresh_process(tmp_path: Path) -> None:
    data = f"data={{name: fashion_mnist, root: {FMNIST}, subset: {SUBSET}, test_subset: {TEST_SUBSET}}}"
    run = _recipe(tmp_path, tmp_path / "run", "rounds=1", data, f"seed={SEED}", f"eval.label_fraction={LABELS}",
                  f"eval.knn_k={K}", "model.backbone=tiny_cnn")
    results = json.loads((run / "results.json").read_text())
    out = tmp_path / "away" / "encoder.pt"
    assert main(["export", str(run), "--out", str(out)]) == 0
    shutil.rmtree(run)  # nothing of the run is left to read: no recipe, no checkpoint
    proc = subprocess.run([sys.executable, "-c", FRESH_KNN, str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout) == results["final"]["knn_acc"]
    assert results["final"]["knn_acc"] != results["baseline"]["knn_acc"]  # a random-init encoder scores otherwise
    found = torch.load(out, weights_only=True)
    assert found["backbone"] == {"name": "tiny_cnn", "options": {}, "channels": 1, "image_size": 28,
                                 "feature_dim": 64, "parameters": 23408}
    assert found["run"]["commit"] == results["provenance"]["commit"] and found["local_parts"] == {}


def test_the_encoder_is_the_global_backbone_in_eval_mode(tiny_run: Path, tmp_path: Path, capsys) -> None:
    assert main(["export", str(tiny_run)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tiny_run / 'encoder.pt'}: the small_cnn encoder of round 1")
    encoder = fedlight.load_encoder(tiny_run / "encoder.pt")
    trained = torch.load(tiny_run / "checkpoints/last.pt", weights_only=True)["global"]
    assert not encoder.training and encoder.feature_dim == 128
    assert encoder.backbone.state_dict().keys() == {k[len("backbone."):] for k in trained if k.startswith("backbone.")}
    assert all(torch.equal(v, trained[f"backbone.{k}"]) for k, v in encoder.backbone.state_dict().items())
    images = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
    assert torch.equal(encoder(images), encoder(images.float() / 255)) and encoder(images).shape == (4, 128)


def _with_results(run: Path, to: Path, **changes) -> Path:
    """A copy of ``run`` at ``to`` whose results.json has ``changes`` (None: the key removed)."""
    shutil.copytree(run, to)
    results = json.loads((run / "results.json").read_text())
    results = {k: v for k, v in {**results, **changes}.items() if v is not None}
    (to / "results.json").write_text(json.dumps(results))
    return to


def test_export_reads_no_data_and_a_run_older_than_inputs_reads_it_again(tiny_run: Path, tmp_path: Path,
                                                                         capsys) -> None:
    results = json.loads((tiny_run / "results.json").read_text())
    inputs = results["inputs"]
    assert inputs["channels"] == 3 and inputs["image_size"] == 16 and len(inputs["normalize"]["std"]) == 3
    gone = {**results["recipe"], "data": {**results["recipe"]["data"], "name": "fashion_mnist",
                                          "root": str(tmp_path / "gone"), "download": False}}
    away = _with_results(tiny_run, tmp_path / "away", recipe=gone)  # its data is not on this machine
    assert main(["export", str(away), "--out", str(tmp_path / "away.pt")]) == 0
    assert torch.load(tmp_path / "away.pt", weights_only=True)["normalize"] == inputs["normalize"]
    older = _with_results(tiny_run, tmp_path / "older", inputs=None)  # the same normalisation, from the data
    assert main(["export", str(older), "--out", str(tmp_path / "older.pt")]) == 0
    assert torch.load(tmp_path / "older.pt", weights_only=True)["normalize"] == inputs["normalize"]
    older_away = _with_results(away, tmp_path / "older_away", inputs=None)
    capsys.readouterr()
    assert main(["export", str(older_away), "--out", str(tmp_path / "none.pt")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "none.pt").exists()


@pytest.mark.parametrize("inputs", [
    {"channels": 1, "image_size": 28, "normalize": {"mean": ["a"], "std": [0.3]}},
    {"channels": True, "image_size": 28, "normalize": {"mean": [0.3], "std": [0.3]}},
    {"channels": 0, "image_size": 28, "normalize": {"mean": [], "std": []}},
    {"channels": 1, "image_size": 28, "normalize": {"mean": None, "std": [0.3]}},
    {"channels": 1, "image_size": 28, "normalize": {"mean": [0.3], "std": [0.0]}},
    {"channels": 1, "image_size": 28, "normalize": [0.3, 0.3]},
    [1, 28],
], ids=["text", "bool", "no channel", "null", "zero std", "list", "not a mapping"])
def test_an_inputs_out_of_shape_is_refused_before_it_reaches_an_encoder_file(inputs: object) -> None:
    with pytest.raises(UserError, match="results.json' has a malformed 'inputs'"):
        _recorded_inputs({"inputs": inputs}, Path("run/results.json"))


def _damaged(run: Path) -> None:
    path = run / "checkpoints/last.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _malformed_inputs(run: Path) -> None:
    results = json.loads((run / "results.json").read_text())
    results["inputs"]["normalize"] = {"mean": [0.5]}  # hand-edited: no std, one mean for three channels
    (run / "results.json").write_text(json.dumps(results))


def _unfinished(run: Path) -> None:
    results = json.loads((run / "results.json").read_text())
    results["recipe"]["rounds"] = 3
    (run / "results.json").write_text(json.dumps(results))


def _stopped_mid_round(run: Path) -> None:
    """A finished run resumed with more rounds and preempted between clients: the checkpoint still says the
    last finished round, with the next round's partial sum (and its clients' new local parts in the store)."""
    from fedlight.engine.state.checkpoint import read_checkpoint, save_checkpoint

    ckpt, _ = read_checkpoint(run / "checkpoints/last.pt")
    save_checkpoint(run / "checkpoints/last.pt", {**ckpt, "partial": {"acc": None, "reports": []}})


@pytest.mark.parametrize("harm, expected", [
    (lambda run: (run / "results.json").unlink(), "results.json' is missing: pass the run folder"),
    # the command as it runs in this shell: `fedlight ...`, or `<this python> -m fedlight ...` off an activated venv
    (_unfinished, f"has finished 1 of its 3 rounds: finish it first with {fedlight_command('fit', '--recipe')}"),
    (lambda run: (run / "checkpoints/last.pt").unlink(), "has no checkpoint"),
    (_damaged, "last.pt' fails its sha256 check"),
    (_malformed_inputs, "results.json' has a malformed 'inputs'"),
    (_stopped_mid_round, "holds a round stopped between its clients (the run was resumed with more rounds and "
                         f"interrupted): finish it first with {fedlight_command('fit', '--recipe')}"),
], ids=["no results", "unfinished", "no checkpoint", "damaged checkpoint", "malformed inputs", "stopped mid-round"])
def test_export_refuses_in_one_line(tiny_run: Path, tmp_path: Path, capsys, harm, expected: str) -> None:
    run = tmp_path / "copy"
    shutil.copytree(tiny_run, run)
    harm(run)
    assert main(["export", str(run), "--out", str(tmp_path / "e.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and str(run) in err, err
    assert not (tmp_path / "e.pt").exists()


def test_load_encoder_refuses_a_file_that_is_no_export(tiny_run: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"last.pt' is no fedlight encoder export \(a run checkpoint\)"):
        fedlight.load_encoder(tiny_run / "checkpoints/last.pt")
    (tmp_path / "notes.pt").write_text("not a model")
    with pytest.raises(UserError, match="notes.pt' does not load"):
        fedlight.load_encoder(tmp_path / "notes.pt")
    with pytest.raises(UserError, match="missing.pt' cannot be read"):
        fedlight.load_encoder(tmp_path / "missing.pt")


def test_an_export_whose_content_changed_since_it_was_written_is_refused(tiny_run: Path, tmp_path: Path) -> None:
    """torch.load reads a flipped bit inside a tensor as another number: the file carries its own digest."""
    out, _ = export_encoder(tiny_run, tmp_path / "e.pt")
    export = torch.load(out, weights_only=True)
    key = next(iter(export["state_dict"]))
    for changed in ({**export, "state_dict": {**export["state_dict"], key: export["state_dict"][key] + 1e-6}},
                    {**export, "normalize": {**export["normalize"], "std": [0.5] * len(export["normalize"]["std"])}}):
        torch.save(changed, tmp_path / "damaged.pt")
        with pytest.raises(UserError, match=r"damaged.pt' fails its sha256 check"):
            fedlight.load_encoder(tmp_path / "damaged.pt")
    del export["sha256"]  # an export written before the digest: loads as it did
    torch.save(export, tmp_path / "older.pt")
    assert fedlight.load_encoder(tmp_path / "older.pt").feature_dim == export["backbone"]["feature_dim"]
    assert fedlight.load_encoder(out).feature_dim == export["backbone"]["feature_dim"]


@pytest.mark.parametrize("store", ["memory", "disk"])
def test_lg_fedavg_exports_each_clients_local_layers(tmp_path: Path, store: str) -> None:
    """LG-FedAvg's CIFAR split: the convolutions global, fc1 and fc2 each client's own, wherever the store keeps them."""
    run = _recipe(tmp_path, tmp_path / "lg", "model.backbone=lenet5", "clients.num=3", "rounds=2",
                  "method={name: lg, objective: supervised, global_layers: [backbone.conv1, backbone.conv2], "
                  "warmup_rounds: 1}", f"run.client_state={store}")
    out = tmp_path / "lg.pt"
    assert main(["export", str(run), "--out", str(out)]) == 0
    ckpt = torch.load(run / "checkpoints/last.pt", weights_only=True)
    stored = ckpt["clients"] if store == "memory" else {
        int(p.name[1:p.name.index("-")]): torch.load(p, weights_only=True)
        for p in sorted((run / "checkpoints/clients").glob("c*-r*.pt"), key=lambda p: p.name.split("-")[1])}
    parts = fedlight.load_local_parts(out)
    assert sorted(parts) == [0, 1, 2]
    for client, part in parts.items():
        assert set(part) == {f"{layer}.{p}" for layer in ("fc1", "fc2") for p in ("weight", "bias")}
        encoder = fedlight.load_encoder(out, client=client)
        for key, value in encoder.backbone.state_dict().items():
            source = ckpt["global"] if key.startswith("conv") else stored[client]
            assert torch.equal(value, source[f"objective.backbone.{key}"]), (client, key)
    assert not torch.equal(parts[0]["fc1.weight"], parts[1]["fc1.weight"])
    with pytest.raises(UserError, match=r"tensors such as 'fc1.weight' of their own.*client=N \(N in 0, 1, 2\)"):
        fedlight.load_encoder(out)
    with pytest.raises(UserError, match="no local part of client 7; clients with one: 0, 1, 2"):
        fedlight.load_encoder(out, client=7)
    if store == "disk":  # a recorded client state file damaged since: named, nothing written
        victim = max((run / "checkpoints/clients").glob("c1-r*.pt"))
        victim.write_bytes(victim.read_bytes()[:-10])
        with pytest.raises(UserError, match=f"client state file '{victim}' fails its sha256 check"):
            export_encoder(run, tmp_path / "again.pt")
        assert not (tmp_path / "again.pt").exists()


DAMAGE = {  # what a damaged (or hand-made) export holds -> what the one line says is wrong
    "unknown backbone option": (lambda e: {**e, "backbone": {**e["backbone"], "options": {"bogus": 1}}},
                                r"builds backbone 'small_cnn' with options \{'bogus': 1\}, which this fedlight's refuses"),
    "no normalize": (lambda e: {k: v for k, v in e.items() if k != "normalize"}, r"'normalize' is missing, not a mapping"),
    "backbone a list": (lambda e: {**e, "backbone": [e["backbone"]]}, r"'backbone' is a list, not a mapping"),
    "state_dict a list": (lambda e: {**e, "state_dict": list(e["state_dict"].values())}, r"'state_dict' is a list"),
    "local_parts a list": (lambda e: {**e, "local_parts": []}, r"'local_parts' is a list, not a mapping"),
    "mean a mapping": (lambda e: {**e, "normalize": {**e["normalize"], "mean": {"r": 0.5}}},
                       r"'normalize.mean' is a dict, not a list of 3 numbers"),
    "channels text": (lambda e: {**e, "backbone": {**e["backbone"], "channels": "1"}},
                      r"'backbone.channels' is a str, not a int"),
}


@pytest.mark.parametrize("digest", ["recomputed", "none"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_export_is_one_error_naming_the_file_and_what_is_wrong(tiny_run: Path, tmp_path: Path,
                                                                        damage: str, digest: str) -> None:
    """A file whose layout is wrong (written by hand, or a digest that matches damaged content): a traceback
    from deep inside ``load_encoder`` before (``KeyError: 'normalize'``, ``TypeError: ... 'bogus'``)."""
    from fedlight.models.encoder_file import content_digest

    out, _ = export_encoder(tiny_run, tmp_path / "e.pt")
    change, expected = DAMAGE[damage]
    damaged = {k: v for k, v in change(torch.load(out, weights_only=True)).items() if k != "sha256"}
    if digest == "recomputed" and not isinstance(damaged.get("state_dict"), list) and isinstance(
            damaged.get("local_parts"), dict):
        damaged["sha256"] = content_digest(damaged)
    torch.save(damaged, tmp_path / "damaged.pt")
    builds = damage == "unknown backbone option"  # load_local_parts builds no backbone: its parts are fine
    for load in (fedlight.load_encoder,) if builds else (fedlight.load_encoder, fedlight.load_local_parts):
        with pytest.raises(UserError, match=rf"encoder file '{tmp_path}/damaged.pt' .*{expected}") as caught:
            load(tmp_path / "damaged.pt")
        assert "\n" not in str(caught.value)
