"""``fedlight.probe_encoder``: an exported encoder scored as its run scored it, from the files set-up installs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fedlight
from fedlight.cli import main
from fedlight.config import load_recipe
from fedlight.engine.run.fit import fit
from fedlight.errors import UserError
from fedlight.models.encoder_file import content_digest

REPO = Path(__file__).resolve().parents[1]
FMNIST = Path("/usr/share/datasets/fashion-mnist")


def exported_run(tmp: Path, *overrides: str) -> tuple[Path, dict]:
    """(the export of a finished one-round Fashion-MNIST run, the run's results.json)."""
    if not FMNIST.is_dir():
        pytest.skip("needs Debian's dataset-fashion-mnist (scripts/setup.sh)")
    from conftest import TINY

    recipe = tmp / "tiny.yaml"
    recipe.write_text(TINY.format(repo=REPO) + f"run: {{dir: {tmp / 'run'}}}\n")
    data = f"data={{name: fashion_mnist, root: {FMNIST}, subset: 600, test_subset: 300}}"
    fit(load_recipe(recipe, ["rounds=1", data, "seed=5", "eval.label_fraction=0.2", "eval.knn_k=15",
                             "eval.probe_epochs=10", "eval.extra_label_fractions=[0.5]", "model.backbone=tiny_cnn",
                             *overrides]))
    assert main(["export", str(tmp / "run")]) == 0
    return tmp / "run" / "encoder.pt", json.loads((tmp / "run" / "results.json").read_text())


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, dict]:
    return exported_run(tmp_path_factory.mktemp("probe"))


def test_the_helper_gives_the_runs_final_knn_and_probe(export: tuple[Path, dict]) -> None:
    path, results = export
    final = results["final"]
    scores = fedlight.probe_encoder(path)
    assert scores == {k: final[k] for k in ("linear_probe_acc", "knn_acc", "linear_probe_acc@0.5")}
    assert final["knn_acc"] != results["baseline"]["knn_acc"]  # a random-init encoder scores otherwise
    assert fedlight.probe_encoder(path, data_root=FMNIST, knn_k=1)["knn_acc"] != final["knn_acc"]


def test_under_feature_shift_the_helper_scores_the_shifted_images_as_the_run_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another ``seed`` redraws the subsets and the labelled draw, not the run's domains (their transforms'
    parameters come from the run's seed, 5)."""
    path, results = exported_run(tmp_path, "partition.domains=[identity,invert]", "partition.kind=iid")
    final = results["final"]
    assert fedlight.probe_encoder(path) == {k: final[k] for k in ("linear_probe_acc", "knn_acc", "linear_probe_acc@0.5")}
    from fedlight.eval import encoder_probe
    seeds, shift = [], encoder_probe.shift_like_run
    monkeypatch.setattr(encoder_probe, "shift_like_run",
                        lambda data, *args: seeds.append(args[-1]) or shift(data, *args))
    fedlight.probe_encoder(path, seed=9)
    assert seeds == [5]


def test_an_unknown_option_or_an_export_without_the_protocol_is_one_line(export: tuple[Path, dict],
                                                                          tmp_path: Path) -> None:
    path, _ = export
    with pytest.raises(UserError, match="unknown option 'k'; give one of subset, .*knn_k"):
        fedlight.probe_encoder(path, k=5)
    older = torch.load(path, weights_only=True)
    del older["run"]["evaluation"], older["sha256"]
    torch.save({**older, "sha256": content_digest(older)}, tmp_path / "older.pt")
    with pytest.raises(UserError, match="records no evaluation protocol.*fedlight export RUN_DIR --overwrite$"):
        fedlight.probe_encoder(tmp_path / "older.pt")
