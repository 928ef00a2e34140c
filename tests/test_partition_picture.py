"""Seeing a partition: each client's size, label histogram and domain in TensorBoard, partition.json and
``fedlight report``, for every partition kind."""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fedlight.cli import main
from fedlight.data.partition import partition
from fedlight.data.partition_picture import partition_picture, partition_summary, read_summary

from conftest import QUICK_EVAL, SMALL_RUN

LABELS = np.random.default_rng(0).integers(0, 10, 600)
GROUPS = np.random.default_rng(1).integers(0, 12, 600)
KINDS = {"iid": {}, "dirichlet": {"alpha": 0.5}, "shards": {}, "classes": {}, "class_ring": {"classes_per_client": 5},
         "quantity": {"sigma": 1.5}, "natural": {"groups": GROUPS}}


def test_summary_by_hand() -> None:
    labels = np.array([0, 1, 1, 2, 2, 2])
    summary = partition_summary(labels, [np.array([0, 1]), np.array([2, 3, 4, 5])], 3, np.array([1, 1, 0, 0, 0, 0]),
                                ("identity", "blur"))
    assert summary == {"sizes": [2, 4], "label_counts": [[1, 1, 0], [0, 1, 3]], "domain": [1, 0],
                       "domain_names": ["identity", "blur"], "public_client": None, "public_set_label_counts": None}
    assert json.loads(json.dumps(summary)) == summary
    assert partition_summary(labels, [np.array([0, 1]), np.array([2, 3, 4, 5])], 3, public_client=0
                             )["public_set_label_counts"] == [1, 1, 0]  # the share itself
    assert partition_summary(labels, [np.array([0, 1]), np.array([2, 3, 4, 5])], 3, public_client=0,
                             public_labels=np.array([0, 1, 2]))["public_set_label_counts"] == [1, 1, 1]  # its stand-in


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_draws_sizes_labels_and_domain(kind: str) -> None:
    parts = partition(kind, LABELS, 6, np.random.default_rng(0), min_size=5, **KINDS[kind])
    domain = np.repeat([0, 1, 2], 200)
    fig = partition_picture(partition_summary(LABELS, parts, 10, domain, ("identity", "rotate", "noise")), kind)
    bars, heat, strip = fig.axes[:3]
    assert [p.get_width() for p in bars.patches] == [len(p) for p in parts]
    assert np.allclose(heat.images[0].get_array().sum(1), 1)
    assert [t.get_text() for t in strip.get_legend().get_texts()] == ["0: identity", "1: rotate", "2: noise"]
    plt.close(fig)


def test_run_shows_its_feature_shifted_partition_and_report_draws_it(tiny_recipe: Path, tmp_path: Path,
                                                                       capsys) -> None:
    args = ["fit", "--recipe", str(tiny_recipe), "rounds=1", "clients.num=4", "partition.domains=[identity,invert]",
            *SMALL_RUN, *QUICK_EVAL]
    assert main(args) == 0, capsys.readouterr().err
    run = tmp_path / "run"
    summary = read_summary(run)
    assert sum(summary["sizes"]) == 400 and summary["domain"] == [0, 0, 1, 1]
    assert summary["domain_names"] == ["identity", "invert"]
    assert np.asarray(summary["label_counts"]).sum(1).tolist() == summary["sizes"]
    results = json.loads((run / "results.json").read_text())
    assert {"knn_acc_domain0", "knn_acc_domain1"} <= results["final"].keys()
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    acc.Reload()
    assert "data/partition" in acc.Tags()["images"]
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0, capsys.readouterr().err
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Partitions" in text and "(partition_1.png)" in text
    assert (tmp_path / "report" / "partition_1.png").stat().st_size > 1000
