"""Natural partitions from sources that carry a writer id: LEAF's FEMNIST JSON and a saved Hugging Face
dataset, each read from tiny files written here in the real format; bad settings end in one line, exit 2."""

import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from fedlight.cli import main
from fedlight.config.loader import load_recipe
from fedlight.data import natural_sources
from fedlight.data.natural_sources import columns_to_data, femnist
from fedlight.engine.run.fit import prepare_data
from fedlight.errors import UserError

from conftest import QUICK_EVAL

WRITERS = {"f0001_12": 7, "f0002_40": 5, "f0003_03": 9, "f0004_27": 6}  # writer -> its training samples


def write_leaf(root: Path, rng: np.random.Generator) -> None:
    """LEAF's layout: train/ and test/ JSON files, users split over two files as LEAF's niid sampling leaves them."""
    for split, share in (("train", 1.0), ("test", 0.5)):
        (root / split).mkdir(parents=True)
        for file, users in enumerate((list(WRITERS)[:2], list(WRITERS)[2:])):
            blob = {"users": users, "num_samples": [], "user_data": {}}
            for user in users:
                n = max(2, int(WRITERS[user] * share))
                blob["num_samples"].append(n)
                blob["user_data"][user] = {"x": rng.random((n, 784)).round(4).tolist(),
                                           "y": rng.integers(0, 62, n).tolist()}
            (root / split / f"all_data_{file}_niid_0_keep_0_{split}_9.json").write_text(json.dumps(blob))


def test_femnist_reads_leaf_json_with_writers(tmp_path: Path) -> None:
    write_leaf(tmp_path, np.random.default_rng(0))
    data = femnist(tmp_path)
    assert data.train_x.shape == (27, 1, 28, 28) and data.train_x.dtype == torch.uint8 and data.num_classes == 62
    assert np.bincount(data.train_group.numpy()).tolist() == list(WRITERS.values())  # sorted writer names
    blob = json.loads(next((tmp_path / "train").glob("*_0_*.json")).read_text())
    first = np.asarray(blob["user_data"]["f0001_12"]["x"][0]).reshape(28, 28)
    assert np.array_equal(data.train_x[0, 0].numpy(), np.round(first * 255).astype(np.uint8))
    assert data.train_y[0] == blob["user_data"]["f0001_12"]["y"][0]


def femnist_recipe(tiny_recipe: Path, root: Path, *more: str) -> list[str]:
    return ["data.name=femnist", f"data.root={root}", "partition.kind=natural", *more]


def test_natural_partition_of_femnist_through_the_recipe(tiny_recipe: Path, tmp_path: Path) -> None:
    write_leaf(tmp_path / "leaf", np.random.default_rng(0))
    overrides = femnist_recipe(tiny_recipe, tmp_path / "leaf", "clients.num=3")
    data, parts = prepare_data(load_recipe(tiny_recipe, overrides))
    groups = data.train_group.numpy()
    assert all(len(set(groups[p])) == 1 for p in parts) and len({groups[p[0]] for p in parts}) == 3
    again = prepare_data(load_recipe(tiny_recipe, overrides))[1]
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    merged = prepare_data(load_recipe(tiny_recipe, [*overrides, "partition.writers=merge"]))[1]
    assert np.array_equal(np.sort(np.concatenate(merged)), np.arange(27))


def test_femnist_natural_run_trains(tiny_recipe: Path, tmp_path: Path, capsys) -> None:
    write_leaf(tmp_path / "leaf", np.random.default_rng(0))
    args = femnist_recipe(tiny_recipe, tmp_path / "leaf", "clients.num=4", "partition.min_size=1", "rounds=1",
                          "model.backbone=tiny_cnn", "local.batch_size=4", *QUICK_EVAL)
    assert main(["fit", "--recipe", str(tiny_recipe), *args]) == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["rounds_completed"] == 1 and results["recipe"]["data"]["name"] == "femnist"


def bad(args: list[str], capsys) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("fedlight: error: "), err
    return err


def test_natural_refusals_in_one_line(tiny_recipe: Path, tmp_path: Path, capsys) -> None:
    write_leaf(tmp_path / "leaf", np.random.default_rng(0))
    fit = ["fit", "--recipe", str(tiny_recipe)]
    assert "clients.num=5 exceeds the 4 writers" in bad([*fit, *femnist_recipe(tiny_recipe, tmp_path / "leaf",
                                                                                "clients.num=5")], capsys)
    assert "no train/*.json" in bad([*fit, "data.name=femnist", f"data.root={tmp_path}"], capsys)
    assert "no such folder" in bad([*fit, "data.name=femnist", f"data.root={tmp_path / 'nowhere'}"], capsys)
    (tmp_path / "broken" / "train").mkdir(parents=True)
    (tmp_path / "broken" / "train" / "a.json").write_text('{"users": ["u"], "user_data": {}}')
    assert "cannot be read (KeyError" in bad([*fit, "data.name=femnist", f"data.root={tmp_path / 'broken'}"], capsys)
    assert not (tmp_path / "run").exists()


def png(array: np.ndarray) -> dict:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def test_columns_to_data_reads_the_image_feature() -> None:
    """The ``datasets`` Image feature's stored form ({"bytes": png}), decoded PIL images and arrays all give uint8 NCHW."""
    rng = np.random.default_rng(0)
    rgb = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(4)]
    train = {"img": [png(rgb[0]), Image.fromarray(rgb[1]), rgb[2]], "y": [2, 0, 1], "who": ["b", "a", "b"]}
    data = columns_to_data(train, {"img": [png(rgb[3])], "y": [3]}, "img", "y", "who", "here")
    assert data.train_x.shape == (3, 3, 8, 8) and data.num_classes == 4
    assert all(torch.equal(data.train_x[i], torch.from_numpy(rgb[i]).permute(2, 0, 1)) for i in range(3))
    assert data.train_group.tolist() == [1, 0, 1]
    with pytest.raises(UserError, match="not class numbers"):
        columns_to_data({"img": rgb[:1], "y": ["cat"]}, {"img": rgb[:1], "y": [0]}, "img", "y", None, "here")
    with pytest.raises(UserError, match="2 shapes"):
        columns_to_data({"img": [rgb[0], rgb[0][:4]], "y": [0, 0]}, {"img": rgb[:1], "y": [0]}, "img", "y", None, "x")


class FakeSplit:
    """What hf_disk reads of a ``datasets.Dataset``: its column names and whole columns."""

    def __init__(self, columns: dict) -> None:
        self.columns, self.column_names = columns, list(columns)

    def __getitem__(self, name: str) -> list:
        return self.columns[name]


def test_hf_disk_refuses_a_missing_group_column(tmp_path: Path, monkeypatch) -> None:
    """The column checks, with ``load_from_disk`` answered by a stand-in (the library is not needed to check them)."""
    (tmp_path / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    split = FakeSplit({"image": [np.zeros((4, 4), np.uint8)] * 2, "label": [0, 1], "writer": ["a", "b"]})
    fake = SimpleNamespace(load_from_disk=lambda root: {"train": split, "test": split})
    monkeypatch.setattr(natural_sources, "require_datasets", lambda: fake)
    data = natural_sources.hf_disk(tmp_path, "image", "label", "writer")
    assert data.train_group.tolist() == [0, 1] and data.train_x.shape == (2, 1, 4, 4)
    with pytest.raises(UserError, match="data.group_column='user' is not a column of the train split.*image, label"):
        natural_sources.hf_disk(tmp_path, "image", "label", "user")


def test_hf_disk_without_the_extra_is_one_line(tiny_recipe: Path, tmp_path: Path, capsys) -> None:
    try:
        import datasets  # noqa: F401
        pytest.skip("datasets is installed here: the refusal cannot be seen")
    except ImportError:
        pass
    err = bad(["fit", "--recipe", str(tiny_recipe), "data.name=hf_disk", f"data.root={tmp_path}"], capsys)
    assert "pip install 'fedlight[hf]'" in err


def test_hf_disk_reads_a_saved_dataset_and_parquet(tmp_path: Path) -> None:
    """The real library on files it writes: save_to_disk, and the same rows as parquet files."""
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(0)
    rows = {"image": [Image.fromarray(rng.integers(0, 256, (6, 6), dtype=np.uint8)) for _ in range(6)],
            "label": [0, 1, 2, 0, 1, 2], "writer": ["a", "a", "b", "c", "c", "c"]}
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64"),
                                  "writer": datasets.Value("string")})
    split = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "pq").mkdir()
    for name in ("train", "test"):
        split.to_parquet(str(tmp_path / "pq" / f"{name}-00000-of-00001.parquet"))
    for folder in ("saved", "pq"):
        data = natural_sources.hf_disk(tmp_path / folder, "image", "label", "writer")
        assert data.train_x.shape == (6, 1, 6, 6) and data.train_group.tolist() == [0, 0, 1, 2, 2, 2]
        assert torch.equal(data.train_x[0, 0], torch.from_numpy(np.asarray(rows["image"][0])))


def test_hf_disk_reads_palette_16_bit_and_float_pixels_as_their_values() -> None:
    """A palette image's colours, not its indices; 16-bit values scaled, not clipped at 255; a [0, 255] float
    column's dark image kept dark (the [0, 1] test was made image by image, so a maximum of 1 became 255)."""
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 200, 10, 20] + [0] * 762)  # index 1 is (200, 10, 20)
    deep = Image.fromarray(np.full((4, 4), 30000, dtype=np.uint16))
    floats = [np.full((4, 4), 100.0), np.full((4, 4), 1.0)]
    data = columns_to_data({"img": [palette, palette], "y": [0, 1]}, {"img": [palette], "y": [0]}, "img", "y",
                           None, "x")
    assert data.train_x[0, :, 0, 0].tolist() == [200, 10, 20]
    data = columns_to_data({"img": [deep], "y": [0]}, {"img": [deep], "y": [0]}, "img", "y", None, "x")
    assert data.train_x.flatten().unique().tolist() == [117]  # 30000 / 257, rounded
    data = columns_to_data({"img": floats, "y": [0, 1]}, {"img": floats[:1], "y": [0]}, "img", "y", None, "x")
    assert [int(data.train_x[i].max()) for i in range(2)] == [100, 1]
    unit = [np.full((4, 4), 0.5), np.full((4, 4), 1.0)]
    data = columns_to_data({"img": unit, "y": [0, 1]}, {"img": unit[:1], "y": [0]}, "img", "y", None, "x")
    assert [int(data.train_x[i].max()) for i in range(2)] == [128, 255]
