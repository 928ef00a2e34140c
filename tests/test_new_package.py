"""``fedlight new``: the package it writes installs, fedlight finds its entry point, and its own tests pass,
training one round through ``fedlight fit``."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from fedlight.catalog import ATTACKS, METHODS, SERVERS
from fedlight.cli import main
from fedlight.new_package import KINDS, class_name

NAMES = {kind: f"fl_new_{kind}" for kind in KINDS}  # not importable anywhere else


def entry_points(folder: Path) -> dict[str, dict[str, str]]:
    """The generated pyproject's ``[project.entry-points]`` table, read as pip's backend reads it."""
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]["entry-points"]


def put_on_path(site: Path, folder: Path) -> None:
    """What ``pip install`` of ``folder`` leaves in ``site`` (a link to its ``src`` package and a ``.dist-info``
    whose ``entry_points.txt`` is its pyproject's table), without the seconds of a build."""
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    name = project["name"]
    (site / name).symlink_to(folder / "src" / name)
    info = site / f"{name}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
        for group, entries in project["entry-points"].items()))


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict[str, Path]:
    """One package of each kind, written by ``fedlight new``."""
    root = tmp_path_factory.mktemp("new")
    for kind, name in NAMES.items():
        assert main(["new", kind, name, "--dir", str(root / name)]) == 0
    return {kind: root / name for kind, name in NAMES.items()}


@pytest.fixture
def installed(packages: dict[str, Path], tmp_path: Path, monkeypatch) -> Path:
    """The three packages importable and their entry points found, for this test only."""
    site = tmp_path / "site"
    site.mkdir()
    for folder in packages.values():
        put_on_path(site, folder)
    monkeypatch.syspath_prepend(str(site))
    for table in (METHODS, SERVERS, ATTACKS):  # found again, with the new packages (undone after the test)
        monkeypatch.setattr(table, "_found", None)
        monkeypatch.setattr(table, "_loaded", {})
    return site


def generated_tests(folder: Path) -> ModuleType:
    """The package's own test module, imported."""
    path = next((folder / "tests").glob("test_*.py"))
    spec = importlib.util.spec_from_file_location(f"{folder.name}_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_kind_declares_its_class_under_its_group(packages: dict[str, Path]) -> None:
    for kind, folder in packages.items():
        name, cls = NAMES[kind], class_name(NAMES[kind])
        assert entry_points(folder) == {KINDS[kind].group: {name: f"{name}.{kind}:{cls}"}}
        pyproject = tomllib.loads((folder / "pyproject.toml").read_text())
        assert pyproject["build-system"]["build-backend"] == "setuptools.build_meta"
        assert pyproject["tool"]["setuptools"]["packages"]["find"] == {"where": ["src"]}
        module = ast.parse((folder / "src" / name / f"{kind}.py").read_text())
        assert cls in [node.name for node in module.body if isinstance(node, ast.ClassDef)]
        imported = {node.module for node in ast.walk(module) if isinstance(node, ast.ImportFrom)}
        assert not any(m.startswith("fedlight.") for m in imported), imported  # the public surface only
        assert (folder / "README.md").read_text().startswith(f"# {name}\n")


def test_pip_builds_and_installs_a_generated_package(packages: dict[str, Path], tmp_path: Path) -> None:
    """A real build through the pyproject's backend: what ``pip install -e .`` runs, without the network."""
    pytest.importorskip("setuptools", reason="the build backend the generated pyproject names (the dev extra has it)")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "-q", "--target", str(site), str(packages["method"])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    name = NAMES["method"]
    (info,) = site.glob(f"{name}-*.dist-info")
    assert (info / "entry_points.txt").read_text().split() == ["[fedlight.methods]", name, "=",
                                                               f"{name}.method:{class_name(name)}"]
    assert (site / name / "method.py").read_text() == (packages["method"] / "src" / name / "method.py").read_text()


def test_fedlight_methods_lists_each_installed_part(installed: Path, capsys) -> None:
    assert main(["methods"]) == 0
    listed = capsys.readouterr().out
    for kind in KINDS:
        line = next(line for line in listed.splitlines() if line.strip().startswith(NAMES[kind] + " "))
        assert f"[{NAMES[kind]}.{kind}:{class_name(NAMES[kind])}]" in line


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_generated_tests_pass(kind: str, packages: dict[str, Path], installed: Path, tmp_path: Path) -> None:
    """Each trains its part for one round through ``fedlight fit``, after a hand-computed case (the
    aggregator's and the attack's)."""
    tests = generated_tests(packages[kind])
    names = [n for n in vars(tests) if n.startswith("test_")]
    assert names
    for n in names:
        test = getattr(tests, n)
        if "tmp_path" in test.__code__.co_varnames:
            (tmp_path / n).mkdir()
            test(tmp_path / n)
        else:
            test()


@pytest.mark.parametrize("args, said", [
    (["method", "my-method"], "NAME 'my-method' is not a Python identifier .* fedlight new method my_method"),
    (["attack", "class"], "NAME 'class' is not a Python identifier .* fedlight new attack my_class"),
    (["aggregator", "2x"], "NAME '2x' is not a Python identifier .* fedlight new aggregator my_2x"),
    (["method", "simclr"], "'simclr' is fedlight's own method .* pick another NAME"),
    (["attack", "sign_flip"], "'sign_flip' is fedlight's own attack .* pick another NAME"),
    (["aggregator", "torch"], "NAME 'torch' is already an importable module .* pick another NAME"),
    (["model", "x"], "invalid choice: 'model'"),
])
def test_a_name_that_cannot_be_a_package_is_one_line_and_writes_nothing(args: list[str], said: str, tmp_path: Path,
                                                                        capsys) -> None:
    assert main(["new", *args, "--dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and re.search(said, err), err
    assert not (tmp_path / "out").exists()


def test_a_folder_that_holds_something_is_refused_and_kept(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "fl_new_x").mkdir()
    (tmp_path / "fl_new_x" / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert main(["new", "method", "fl_new_x"]) == 2  # the default folder: ./NAME
    assert "--dir 'fl_new_x' already holds files" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "fl_new_x").iterdir()] == ["notes.txt"]
    (tmp_path / "a_file").write_text("")
    assert main(["new", "method", "fl_new_y", "--dir", "a_file"]) == 2
    assert "already holds a file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["new", "attack", "fl_new_y", "--dir", "empty"]) == 0  # an empty folder is filled
    assert (tmp_path / "empty" / "src" / "fl_new_y" / "attack.py").is_file()
    assert capsys.readouterr().out.endswith("next: pip install -e empty && pytest empty\n")


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("case, said", [
    ("under a file", "is a file, so no folder can be made under it"),
    ("dangling link", "is a link to 'nowhere', which does not exist"),
    ("300-character name", "has a name of 300 bytes"),
    ("a write fails", "cannot write"),
    ("read-only folder", "is not writable"),
])
def test_new_where_it_cannot_write_is_one_line_exit_2_and_writes_nothing(case: str, said: str, tmp_path: Path, capsys,
                                                                          monkeypatch) -> None:
    """Each was a traceback (``NotADirectoryError``, ``FileExistsError``, ``OSError: File name too long``,
    ``PermissionError``), the last after some of the package's files were written."""
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("")
    os.symlink("nowhere", tmp_path / "link")
    (tmp_path / "ro").mkdir()
    args = {"under a file": ["fl_new_u", "--dir", "a_file/pkg"], "dangling link": ["fl_new_d", "--dir", "link"],
            "300-character name": ["n" * 300], "a write fails": ["fl_new_w", "--dir", "ro/pkg"],
            "read-only folder": ["fl_new_r", "--dir", "ro/pkg"]}[case]
    if case == "a write fails":  # the fourth file fails (a full disk, a read-only mount root writes past too)
        real, calls = Path.write_text, []

        def write_text(self: Path, text: str) -> int:
            calls.append(self)
            if len(calls) == 4:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, text)

        monkeypatch.setattr(Path, "write_text", write_text)
    if case == "read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder (the case above stands in)")
        (tmp_path / "ro").chmod(0o500)
    before = _tree(tmp_path)
    assert main(["new", "method", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and said in err and err.startswith("fedlight: error: ")
    assert _tree(tmp_path) == before


def test_new_into_an_empty_folder_of_the_packages_name_writes_it(tmp_path: Path, capsys, monkeypatch) -> None:
    """``mkdir X && python -m fedlight new method X --dir X``: X, an empty folder in the working folder, was
    refused as "already an importable module" (a namespace package of nothing)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m` puts the working folder first
    (tmp_path / "fl_new_e").mkdir()
    assert main(["new", "method", "fl_new_e", "--dir", "fl_new_e"]) == 0, capsys.readouterr().err
    assert (tmp_path / "fl_new_e/src/fl_new_e/method.py").is_file()
    (tmp_path / "fl_new_f").mkdir()
    (tmp_path / "fl_new_f/m.py").write_text("")  # a namespace package that holds a module is one
    assert main(["new", "method", "fl_new_f", "--dir", "elsewhere"]) == 2
    assert "already an importable module" in capsys.readouterr().err
