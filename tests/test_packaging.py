"""What a wheel install has: the shipped recipes (by name, listed), configs and SLURM templates as
package data, and scikit-learn as an extra whose absence is one line naming it."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from fedlight.cli import main
from fedlight.config.bundled import BUNDLED, RECIPES, bundled_recipes, first_comment, resolve_recipe
from fedlight.errors import UserError
from fedlight.optional import SKLEARN_INSTALL

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fedlight"


def test_the_package_data_globs_take_every_file_of_the_shipped_folders() -> None:
    """What ``pip wheel`` copies (pyproject's package-data globs under fedlight/) is every file of
    recipes/, configs/ and slurm/: a file a glob misses would be absent from a wheel install."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fedlight"]
    shipped = {p.relative_to(PACKAGE) for g in globs for p in PACKAGE.glob(g) if p.is_file()}
    in_repo = {Path("bundled") / p.relative_to(REPO) for folder in ("recipes", "configs", "slurm")
               for p in (REPO / folder).rglob("*") if p.is_file()}
    assert in_repo and in_repo <= shipped
    assert Path("py.typed") in shipped
    for folder in ("recipes", "configs", "slurm"):  # a clone's top-level folders are the package's
        assert (BUNDLED / folder).resolve() == (REPO / folder).resolve()


def test_a_bare_name_is_the_shipped_recipe_and_a_path_stays_a_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe("sofed_cifar10") == str(RECIPES / "sofed_cifar10.yaml")
    assert resolve_recipe("sofed_cifar10.yaml") == str(RECIPES / "sofed_cifar10.yaml")
    assert resolve_recipe("recipes/other.yaml") == "recipes/other.yaml"  # a path stays a path: the loader's to find
    with pytest.raises(UserError, match="--recipe sofed_cifar10 runs it from any folder"):  # a shipped name: said
        resolve_recipe("recipes/sofed_cifar10.yaml")
    (tmp_path / "sofed_cifar10.yaml").write_text("rounds: 1\n")  # a file here wins over the shipped one
    assert resolve_recipe("sofed_cifar10.yaml") == "sofed_cifar10.yaml"
    with pytest.raises(UserError, match=r"did you mean sofed_cifar10.*'fedlight recipes'"):
        resolve_recipe("sofed_cifr10")


def test_fit_finds_a_shipped_recipe_from_any_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    """The recipe is read (its defaults' relative paths too): the error is the override's, not 'not found'."""
    monkeypatch.chdir(tmp_path)
    assert main(["fit", "--recipe", "quickstart_fmnist", "rounds=oops"]) == 2
    err = capsys.readouterr().err
    assert "rounds" in err and "not found" not in err and "neither a file" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_fedlight_recipes_lists_each_recipe_with_its_first_comment_line(capsys) -> None:
    assert main(["recipes"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert "fedlight fit --recipe NAME" in header
    rows = [line for line in lines if not line.startswith("   ")]  # a long description goes on indented lines
    names = [row.split()[0] for row in rows]
    assert names == sorted(bundled_recipes()) and len(names) == len(list((REPO / "recipes").glob("*.yaml")))
    text = " ".join(" ".join(lines).split())  # a description wraps onto indented lines
    assert "quickstart_fmnist Quickstart: FedAvg + SimCLR on Fashion-MNIST, 10 clients, Dirichlet(0.5);" in text
    assert all(first_comment(path) for path in bundled_recipes().values())  # every recipe says what it is


def test_first_comment_skips_what_precedes_it(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("\n   #  The one line.\n# the second\nrounds: 1\n")
    assert first_comment(path) == "The one line."
    path.write_text("rounds: 1\n")
    assert first_comment(path) == ""


def test_without_sklearn_cfcl_and_the_diabetes_table_name_the_extra(monkeypatch) -> None:
    from fedlight.data.tabular import diabetes
    from fedlight.engine.parts.cfcl.exchange_schedule import ExchangeOptions

    monkeypatch.setitem(sys.modules, "sklearn", None)  # `import sklearn` now raises ImportError
    with pytest.raises(UserError, match=r"exchange.policy=smart .* needs scikit-learn") as caught:
        ExchangeOptions(policy="smart").check(10, "triplet")
    assert str(caught.value).endswith(SKLEARN_INSTALL)
    with pytest.raises(UserError, match=r"data.name=diabetes .* needs scikit-learn") as caught:
        diabetes(seed=0)
    assert str(caught.value).endswith("pip install 'fedlight[sklearn]'")
    ExchangeOptions(policy="uniform").check(10, "simclr")  # uniform pulls need no K-means


def test_a_description_is_its_whole_first_sentence_over_several_comment_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("# SOFed (Table I:\n# 5 devices, sec. III of the paper, e.g. iid). More detail.\n# x\nseed: 1\n")
    assert first_comment(path) == "SOFed (Table I: 5 devices, sec. III of the paper, e.g. iid)."
