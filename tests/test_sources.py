"""Dataset loaders on tiny files written in each dataset's real on-disk format."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.data.idx import read_idx
from fedlight.data.sources import load_dataset, take_subset
from fedlight.errors import UserError

DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")


def _idx_bytes(arr: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def _write_fmnist(root: Path, n: int = 12, gz: bool = True) -> None:
    rng = np.random.default_rng(0)
    files = {"train-images-idx3-ubyte": rng.integers(0, 256, (n, 28, 28)),
             "train-labels-idx1-ubyte": np.arange(n) % 10,
             "t10k-images-idx3-ubyte": rng.integers(0, 256, (4, 28, 28)),
             "t10k-labels-idx1-ubyte": np.arange(4) % 10}
    root.mkdir(parents=True, exist_ok=True)
    for name, arr in files.items():
        data = _idx_bytes(np.asarray(arr))
        (root / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_idx_flat_layout(tmp_path: Path, gz: bool) -> None:
    _write_fmnist(tmp_path, gz=gz)
    data = load_dataset("fashion_mnist", str(tmp_path), download=False)
    assert data.train_x.shape == (12, 1, 28, 28) and data.train_x.dtype == torch.uint8
    assert data.test_y.tolist() == [0, 1, 2, 3] and data.num_classes == 10


def test_fashion_mnist_torchvision_layout(tmp_path: Path) -> None:
    _write_fmnist(tmp_path / "FashionMNIST" / "raw", gz=False)
    assert len(load_dataset("fashion_mnist", str(tmp_path), download=False).train_y) == 12


def test_truncated_idx_is_named(tmp_path: Path) -> None:
    _write_fmnist(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UserError, match="train-images-idx3-ubyte.*truncated"):
        read_idx(path)
    (tmp_path / "bad.gz").write_bytes(b"not gzip at all")
    with pytest.raises(UserError, match="bad.gz"):
        read_idx(tmp_path / "bad.gz")


def test_missing_fashion_mnist_names_root_and_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="data.root.*dataset-fashion-mnist.*data.download"):
        load_dataset("fashion_mnist", str(tmp_path), download=False)


@pytest.mark.skipif(not DEBIAN_FMNIST.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_from_debian() -> None:
    data = load_dataset("fashion_mnist", str(DEBIAN_FMNIST), download=False)
    assert data.train_x.shape == (60000, 1, 28, 28) and data.test_x.shape == (10000, 1, 28, 28)
    assert torch.bincount(data.train_y).tolist() == [6000] * 10
    small = take_subset(data, 1000, 200, seed=0)
    assert len(small.train_y) == 1000 and len(small.test_y) == 200


@pytest.fixture
def no_md5(monkeypatch) -> None:
    """The tiny files cannot match torchvision's published checksums."""
    import torchvision.datasets.cifar as cifar
    import torchvision.datasets.stl10 as stl10
    import torchvision.datasets.svhn as svhn

    for module in (cifar, stl10, svhn):
        monkeypatch.setattr(module, "check_integrity", lambda *a, **k: True)


def _pickle(path: Path, obj: dict) -> None:
    path.write_bytes(pickle.dumps(obj))


def _tiny_cifar(root: Path, name: str) -> tuple[Path, list[str]]:
    """CIFAR-10 / -100 as torchvision stores it (pickled batches of 3 images each, a meta file)
    under ``root``; returns the folder and its batch files, training ones first."""
    rng = np.random.default_rng(0)
    folder = root / ("cifar-10-batches-py" if name == "cifar10" else "cifar-100-python")
    folder.mkdir()
    label_key = "labels" if name == "cifar10" else "fine_labels"
    batches = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if name == "cifar10" else ["train", "test"]
    for b in batches:
        _pickle(folder / b, {"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), label_key: [0, 1, 2]})
    meta = ("batches.meta", "label_names") if name == "cifar10" else ("meta", "fine_label_names")
    _pickle(folder / meta[0], {meta[1]: [f"c{i}" for i in range(10)]})
    return folder, batches


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_pickles(tmp_path: Path, no_md5, name: str) -> None:
    folder, batches = _tiny_cifar(tmp_path, name)
    data = load_dataset(name, str(tmp_path), download=False)
    assert data.train_x.shape == ((15 if name == "cifar10" else 3), 3, 32, 32)
    # the channel-first layout is right: pixel (0, 0) of channel 1 is byte 1024 of the row
    raw = pickle.loads((folder / batches[0]).read_bytes())["data"]
    assert int(data.train_x[0, 1, 0, 0]) == int(raw[0, 1024])


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_a_cifar_file_that_fails_its_checksum_is_named(tmp_path: Path, name: str) -> None:
    """Files in the real on-disk format whose MD5 is not torchvision's are damaged, not missing."""
    folder, batches = _tiny_cifar(tmp_path, name)
    with pytest.raises(UserError) as caught:
        load_dataset(name, str(tmp_path), download=False)
    message = str(caught.value)
    assert f"'{folder / batches[0]}' fails its checksum: re-download" in message, message
    assert "not found" not in message


def test_a_cifar_folder_without_its_files_is_not_found(tmp_path: Path) -> None:
    folder, batches = _tiny_cifar(tmp_path, "cifar10")
    for b in batches:  # only the empty folder is left: nothing fails a checksum
        (folder / b).unlink()
    (folder / "batches.meta").unlink()
    with pytest.raises(UserError, match="cifar10 not found in data.root"):
        load_dataset("cifar10", str(tmp_path), download=False)


def test_svhn_mat(tmp_path: Path, no_md5) -> None:
    from scipy.io import savemat

    for split in ("train", "test"):
        x = np.random.default_rng(0).integers(0, 256, (32, 32, 3, 5), dtype=np.uint8)
        savemat(tmp_path / f"{split}_32x32.mat", {"X": x, "y": np.array([[1], [2], [10], [3], [4]])})
    data = load_dataset("svhn", str(tmp_path), download=False)
    assert data.train_x.shape == (5, 3, 32, 32) and data.train_y.tolist() == [1, 2, 0, 3, 4]


def test_stl10_binary(tmp_path: Path, no_md5) -> None:
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    for split, n in (("train", 3), ("test", 2)):
        np.random.default_rng(0).integers(0, 256, n * 3 * 96 * 96, dtype=np.uint8).tofile(folder / f"{split}_X.bin")
        np.arange(1, n + 1, dtype=np.uint8).tofile(folder / f"{split}_y.bin")
    (folder / "class_names.txt").write_text("\n".join(f"c{i}" for i in range(10)))
    data = load_dataset("stl10", str(tmp_path), download=False)
    assert data.train_x.shape == (3, 3, 96, 96) and data.train_y.tolist() == [0, 1, 2]


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "svhn", "stl10"])
def test_missing_torchvision_dataset_names_root_and_download(tmp_path: Path, name: str) -> None:
    with pytest.raises(UserError, match="data.root.*data.download"):
        load_dataset(name, str(tmp_path), download=False)


def test_corrupt_cifar_pickle_is_one_line(tmp_path: Path, no_md5) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for b in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
        (folder / b).write_bytes(b"garbage")
    with pytest.raises(UserError, match="cifar10.*cannot be read"):
        load_dataset("cifar10", str(tmp_path), download=False)


def test_preflight_knows_every_torchvision_dataset_the_loader_reads() -> None:
    from fedlight.data.locate import TORCHVISION_DATASETS
    from fedlight.data.sources import TORCHVISION

    assert set(TORCHVISION_DATASETS) == set(TORCHVISION)


@pytest.mark.parametrize("name", ["fashion_mnist", "cifar10", "svhn"])
def test_missing_data_shows_the_layout_expected_under_data_root(tmp_path: Path, name: str) -> None:
    from fedlight.data.locate import LAYOUTS

    with pytest.raises(UserError) as caught:
        load_dataset(name, str(tmp_path), download=False)
    assert f"(expected: {LAYOUTS[name]})" in str(caught.value) and "data.download=true" in str(caught.value)


@pytest.mark.parametrize("name, cls", [("fashion_mnist", "FashionMNIST"), ("cifar10", "CIFAR10")])
def test_a_failed_download_shows_the_layout_and_does_not_suggest_downloading(tmp_path: Path, monkeypatch,
                                                                            name: str, cls: str) -> None:
    """Offline, data.download=true fails: the error says so, names the files to copy, and does not
    suggest the data.download=true that was given."""
    import urllib.error

    import torchvision.datasets as tvd

    from fedlight.data.locate import LAYOUTS

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(tvd, cls, offline)
    with pytest.raises(UserError) as caught:
        load_dataset(name, str(tmp_path), download=True)
    message = str(caught.value)
    assert message.startswith(f"downloading {name} into data.root '{tmp_path}' failed (URLError: ")
    assert LAYOUTS[name] in message and "data.download=true" not in message and "data.download=false" in message
