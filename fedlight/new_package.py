"""``fedlight new``: a package folder that adds a method, an aggregator or an attack to fedlight.

``write_package("method", "my_method", Path("my_method"))`` writes::

    my_method/pyproject.toml            the entry point (``[project.entry-points."fedlight.methods"]``)
    my_method/README.md                 install, test, run: a few lines
    my_method/src/my_method/__init__.py
    my_method/src/my_method/method.py   a minimal but working part, imported from ``fedlight`` only
    my_method/tests/test_my_method.py   pytest: one round on fedlight's synthetic data

The parts are real: a SimCLR-like objective from lightly's head and loss (method), a
coordinate-wise trimmed mean (aggregator, the payloads contract), a scaled sign flip (attack).
Only the standard library and ``fedlight.catalog`` are imported here, so the command answers at
once; the templates are ``string.Template`` text (``$name``, ``$cls``), since their code is
never run in this package.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import keyword
import os
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from fedlight.catalog import ATTACKS, METHODS, SERVERS
from fedlight.config.files import length_problem, output_folder_problem
from fedlight.errors import UserError

PYPROJECT = Template('''\
# $name: a fedlight $kind, from `fedlight new $kind $name`; `pip install -e .` installs it
[build-system]
requires = ["setuptools>=64"]  # 64: editable installs (PEP 660)
build-backend = "setuptools.build_meta"

[project]
name = "$name"
version = "0.1.0"
description = "$summary"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["fedlight"]

[project.optional-dependencies]
test = ["pytest>=7"]

# what fedlight finds: the name a recipe uses -> the class
[project.entry-points."$group"]
$name = "$name.$kind:$cls"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
''')

README = Template('''\
# $name

$summary. A fedlight $kind under the entry point `$group`, written by `fedlight new $kind $name`;
the code is `src/$name/$kind.py`, its test `tests/test_$name.py`.

    pip install -e .        # fedlight finds it by its entry point; `fedlight methods` lists it
    pytest                  # $tested
    fedlight fit --recipe quickstart_fmnist name=$name $usage

fedlight's docs/new_package.md says what fedlight asks of it.
''')

METHOD = Template('''\
"""$name: a fedlight method (entry point ``fedlight.methods``), from ``fedlight new method $name``.

A contrastive objective in the manner of SimCLR (Chen et al., "A Simple Framework for
Contrastive Learning of Visual Representations", ICML 2020, https://arxiv.org/abs/2002.05709),
built from lightly's projection head and NT-Xent loss. Make it your own in ``training_step`` and
the heads it uses; a sub-module is declared shared (averaged by the server), private (kept by
each client) or transient (rebuilt every round).
"""

from __future__ import annotations

from typing import Annotated

import torch
from lightly.loss import NTXentLoss
from lightly.models.modules import SimCLRProjectionHead
from torch import nn

from fedlight import Batch, FederatedModule, OptimizerSpec, positive


class $cls(FederatedModule):
    """Two augmented views of an image attract, the batch's other images repel (NT-Xent).

    A recipe sets every argument after ``optim`` as a ``method.*`` key, checked by its annotation:
    ``method: {name: $name, hidden_dim: 512, output_dim: 128, temperature: 0.5}``.

    Args:
        backbone: the encoder ``model.backbone`` builds: (B, C, H, W) -> (B, backbone.feature_dim).
        optim: the local optimizer, from ``local.*``.
        hidden_dim: the projection head's hidden width.
        output_dim: the embedding width: z of shape (B, output_dim).
        temperature: NT-Xent's softmax temperature (SimCLR: 0.5).
    """

    shared_modules = ("backbone", "projection_head")  # averaged by the server
    private_modules = ()  # kept by each client between its rounds: none here
    num_views = 2  # training_step receives two augmented views of every image

    def __init__(self, backbone: nn.Module, optim: OptimizerSpec | None = None,
                 hidden_dim: Annotated[int, positive] = 512, output_dim: Annotated[int, positive] = 128,
                 temperature: Annotated[float, positive] = 0.5) -> None:
        super().__init__(backbone, optim)
        self.projection_head = SimCLRProjectionHead(backbone.feature_dim, hidden_dim, output_dim)
        self.criterion = NTXentLoss(temperature=temperature)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """The loss of one batch ``((x0, x1), y)``: two views (B, C, H, W) of B images; labels y unused."""
        (x0, x1), _ = batch
        z0, z1 = self.projection_head(self.backbone(x0)), self.projection_head(self.backbone(x1))
        return self.criterion(z0, z1)
''')

AGGREGATOR = Template('''\
"""$name: a fedlight aggregator (entry point ``fedlight.aggregators``), from ``fedlight new aggregator $name``.

A coordinate-wise trimmed mean (Yin, Chen, Ramchandran and Bartlett, "Byzantine-Robust
Distributed Learning: Towards Optimal Statistical Rates", ICML 2018, Algorithm 2,
https://arxiv.org/abs/1803.01498), written to the payloads contract: ``finalize`` receives every
answering client's upload at once. An aggregator that needs only a running sum (FedAvg's kind)
sets no ``needs_payloads`` and implements ``accumulate`` too: see fedlight's ``Aggregator``.
"""

from __future__ import annotations

import math
from typing import Annotated

import torch

from fedlight import Aggregator, ClientPayload, State


def below_half(trim: float) -> str | None:
    """``server.trim``'s range: what is wrong with it, or None (a recipe that breaks it is one line)."""
    return None if 0 <= trim < 0.5 else "must be in [0, 0.5): a share of 0.5 would drop every client"


class $cls(Aggregator):
    """Each coordinate drops its ``floor(trim * n)`` largest and smallest values among the n
    answering clients and averages the rest (every client counts once).

    Args:
        trim: the share dropped from each side, below 0.5 (``server.trim``; 0 is a plain mean).
    """

    needs_payloads = True  # finalize gets list[ClientPayload], sorted by client, on the CPU

    def __init__(self, trim: Annotated[float, below_half] = 0.1) -> None:
        self.trim = trim

    def finalize(self, global_state: State, payloads: list[ClientPayload]) -> State:
        """The new global state: for every entry of ``global_state``, the trimmed mean over the
        clients' tensors of its shape, cast back to its dtype and device (integer buffers rounded)."""
        cut = math.floor(self.trim * len(payloads))
        new = {}
        for key, ref in global_state.items():
            stacked = torch.stack([p.payload[key].double() for p in payloads])  # (n, *shape)
            kept = stacked.sort(dim=0).values[cut:len(payloads) - cut]
            mean = kept.mean(dim=0)
            new[key] = (mean if ref.is_floating_point() else mean.round()).to(ref.dtype).to(ref.device)
        return new
''')

ATTACK = Template('''\
"""$name: a fedlight attack (entry point ``fedlight.attacks``), from ``fedlight new attack $name``.

A Byzantine client that sends its update reversed and scaled: instead of ``x_global + u`` with
``u = x_trained - x_global``, it sends ``x_global - scale * u`` (the sign-flip attack of
Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient Descent",
NeurIPS 2017, https://arxiv.org/abs/1703.02757, and El Mhamdi et al., ICML 2018), as fedlight's
own ``sign_flip`` does: make it your own in ``update``. ``UpdateAttack`` does the arithmetic
around it: ``update`` sees the learnable floating-point entries only; BatchNorm statistics and
integer buffers go as trained.
"""

from __future__ import annotations

from typing import Annotated

from fedlight import AttackContext, State, UpdateAttack, positive


class $cls(UpdateAttack):
    """Sends its update reversed and scaled: ``-scale * u``.

    A recipe picks it with ``faults.attack=$name`` and a share ``faults.attackers`` of the clients;
    ``scale`` is ``faults.attack_scale``, any other constructor argument a ``faults.attack_options`` key.

    Args:
        scale: how far the reversed update reaches.
    """

    def __init__(self, scale: Annotated[float, positive] = 10.0) -> None:
        self.scale = scale

    def update(self, own: State, benign: list[State], context: AttackContext) -> State:
        """The update it sends, given its own ``u`` (name -> tensor); ``benign`` is empty unless the
        class sets ``needs_benign = True`` (then: the round's benign updates)."""
        return {key: -self.scale * u for key, u in own.items()}
''')

# every generated test trains its part for one round through ``fedlight fit`` (in-process: ``fedlight.cli.main``)
FIT_TEST = Template('''\
"""$name trains for one round through ``fedlight fit`` on fedlight's synthetic data (seconds, on a CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path
$imports
# 256 of fedlight's synthetic 3 x 16 x 16 images (class templates plus noise, made in memory: nothing to download)
RECIPE = """
rounds: 1
data: {name: synthetic, subset: 256, test_subset: 128}
model: {backbone: tiny_cnn}
clients: {num: 4}
local: {epochs: 1, batch_size: 64}
eval: {probe_epochs: 1, knn_k: 5, projector_samples: 0}
fabric: {accelerator: cpu}
"""
PART = $section  # the part under test, as a recipe names it

$unit
def test_${name}_trains_one_round_through_fedlight_fit(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    run = tmp_path / "run"
    assert main(["fit", "--recipe", str(recipe), *PART, f"run.dir={run}"]) == 0
    results = json.loads((run / "results.json").read_text())
    row = results["history"][0]
    assert results["rounds_completed"] == 1 and row["answered"] == 4 and math.isfinite(row["train_loss"])
    assert $recorded
''')

AGGREGATOR_UNIT = '''
def test_each_coordinate_drops_its_extremes_and_averages_the_rest() -> None:
    """Four clients, trim 0.25: each coordinate drops its largest and smallest value."""
    values = [[1.0, 40.0], [2.0, 10.0], [3.0, 20.0], [-100.0, 30.0]]
    payloads = [ClientPayload(c, 1.0, {"w": torch.tensor(v), "n": torch.tensor(c)}) for c, v in enumerate(values)]
    new = $cls(trim=0.25).finalize({"w": torch.zeros(2), "n": torch.tensor(0)}, payloads)
    assert new["w"].tolist() == [1.5, 25.0]  # (1 + 2) / 2 and (20 + 30) / 2
    assert new["n"].dtype == torch.int64 and new["n"].item() == 2  # (1 + 2) / 2 = 1.5, rounded to even

'''

ATTACK_UNIT = '''
def test_the_update_is_reversed_and_scaled_and_statistics_go_as_trained() -> None:
    global_state = {"w": torch.tensor([1.0, 2.0]), "bn.running_mean": torch.tensor([0.0]),
                    "bn.num_batches_tracked": torch.tensor(3)}
    trained = {"w": torch.tensor([1.5, 1.0]), "bn.running_mean": torch.tensor([0.25]),
               "bn.num_batches_tracked": torch.tensor(5)}
    context = AttackContext(global_state, torch.Generator(), benign=[], attackers=None, round_=0, client=0)
    sent = $cls(scale=2.0).craft(trained, context)
    assert sent["w"].tolist() == [0.0, 4.0]  # update (0.5, -1) -> (-1, 2), from (1, 2)
    assert sent["bn.running_mean"].item() == 0.25 and sent["bn.num_batches_tracked"].item() == 5

'''


@dataclass(frozen=True)
class Kind:
    """What ``fedlight new KIND`` writes for one kind of part.

    Attributes:
        group: the entry-point group fedlight reads.
        summary: the package's one-line description.
        code: the module's template.
        tested: what the README says ``pytest`` does.
        usage: the ``fedlight fit`` overrides that use it.
        test_parts: what ``FIT_TEST`` leaves to the kind: its ``imports``, a ``unit`` test before the
            run, the recipe overrides that name the part (``section``, a list) and what the run
            ``recorded`` of it (an expression of ``results`` and ``row``, its first history row).
    """

    group: str
    summary: str
    code: Template
    tested: str
    usage: str
    test_parts: dict[str, str]


KINDS = {
    "method": Kind(
        "fedlight.methods", "A SimCLR-like contrastive objective (lightly's head and NT-Xent loss)", METHOD,
        "trains it for one round on synthetic data", '"method={name: $name}"',
        {"imports": "\nfrom fedlight.cli import main\n", "unit": "",
         "section": '["method={name: $name, hidden_dim: 32, output_dim: 16}"]',
         "recorded": 'results["recipe"]["method"]["name"] == "$name"'}),
    "aggregator": Kind(
        "fedlight.aggregators", "A coordinate-wise trimmed mean of the clients' models", AGGREGATOR,
        "checks the trimmed mean by hand, then trains one round with it", '"server={name: $name, trim: 0.2}"',
        {"imports": "\nimport torch\n\nfrom fedlight import ClientPayload\nfrom fedlight.cli import main\n"
                    "from $name.aggregator import $cls\n",
         "unit": AGGREGATOR_UNIT, "section": '["server={name: $name, trim: 0.25}"]',
         "recorded": 'results["recipe"]["server"]["name"] == "$name"'}),
    "attack": Kind(
        "fedlight.attacks", "A sign-flip attack: Byzantine clients send their update reversed and scaled", ATTACK,
        "checks the sign flip by hand, then trains one round in which half the clients attack",
        "faults.attack=$name faults.attackers=0.2",
        {"imports": "\nimport torch\n\nfrom fedlight import AttackContext\nfrom fedlight.cli import main\n"
                    "from $name.attack import $cls\n",
         "unit": ATTACK_UNIT, "section": '["faults.attack=$name", "faults.attackers=0.5"]',
         "recorded": 'results["recipe"]["faults"]["attack"] == "$name" and row["attackers"] == 2'}),
}
# names fedlight already has: a built-in wins over a package's
BUILT_IN = {"method": METHODS, "aggregator": SERVERS, "attack": ATTACKS}


def class_name(name: str) -> str:
    """``my_method`` -> ``MyMethod``: the part's class (``x`` -> ``X``)."""
    return "".join(word[:1].upper() + word[1:] for word in name.split("_") if word) or "Part"


def check_name(kind: str, name: str) -> None:
    """Raise the UserError for a NAME that cannot be a package, module and entry-point name of ``kind``."""
    if not name.isidentifier() or keyword.iskeyword(name):
        fixed = re.sub(r"\W", "_", name).strip("_") or "my_part"
        fixed = f"my_{fixed}" if fixed[0].isdigit() or keyword.iskeyword(fixed) else fixed
        raise UserError(f"NAME '{name}' is not a Python identifier (letters, digits and _, not a keyword, no digit "
                        f"first), as a package name must be; e.g. fedlight new {kind} {fixed}")
    if name in BUILT_IN[kind].builtins:
        raise UserError(f"'{name}' is fedlight's own {kind} (a built-in name wins over a package's); pick another NAME")
    found = importlib.util.find_spec(name)
    if found is not None and not _only_empty_folders(found):
        where = found.origin or next(iter(found.submodule_search_locations or []), "?")
        raise UserError(f"NAME '{name}' is already an importable module ({where}), which the package would "
                        "shadow or be shadowed by; pick another NAME")


def _only_empty_folders(spec: importlib.machinery.ModuleSpec) -> bool:
    """Whether ``spec`` is a namespace package of empty folders alone (``--dir NAME`` made ahead, in the
    working folder): nothing to import, nothing the package could shadow."""
    locations = [Path(p) for p in spec.submodule_search_locations or []] if spec.origin in (None, "namespace") else []
    return bool(locations) and all(p.is_dir() and not any(p.iterdir()) for p in locations)


def _folder_problem(folder: Path, paths: list[Path]) -> str | None:
    """Why the package's files ``paths`` cannot be written into ``folder`` (absent or empty), with the fix, or None."""
    too_long = next(filter(None, map(length_problem, paths)), None)  # before any stat, which it would fail
    if too_long:
        return f"a file of the package, {too_long}; pick a shorter NAME or --dir"
    if folder.is_symlink() and not folder.exists():
        return (f"--dir '{folder}' is a link to '{os.readlink(folder)}', which does not exist; name a new or empty "
                "folder with --dir")
    if folder.is_file() or (folder.is_dir() and any(folder.iterdir())):
        return (f"--dir '{folder}' already holds {'a file' if folder.is_file() else 'files'}; name a new or empty "
                "folder with --dir")
    blocked = output_folder_problem(folder)
    return f"--dir {blocked}; name a new or empty folder with --dir" if blocked else None


def files(kind: str, name: str) -> dict[str, str]:
    """The package's files of ``kind`` named ``name``: relative path -> text."""
    spec, cls = KINDS[kind], class_name(name)
    fill = {"name": name, "cls": cls, "kind": kind, "group": spec.group, "summary": spec.summary}
    test = {key: Template(text).substitute(fill) for key, text in spec.test_parts.items()}
    readme = {"tested": spec.tested, "usage": Template(spec.usage).substitute(fill)}
    return {"pyproject.toml": PYPROJECT.substitute(fill),
            "README.md": README.substitute(fill, **readme),
            f"src/{name}/__init__.py": f'"""{spec.summary}: a fedlight {kind} (``{name}.{kind}.{cls}``)."""\n',
            f"src/{name}/{kind}.py": spec.code.substitute(fill),
            f"tests/test_{name}.py": FIT_TEST.substitute(fill, **test)}


def write_package(kind: str, name: str, folder: Path) -> list[Path]:
    """Write the package of ``kind`` named ``name`` into ``folder`` (absent or empty); return its files.

    Raises:
        UserError: ``name`` is no identifier, a built-in's or an importable module's name, or ``folder``
            is a file, a folder that holds something, a dangling link, under a file or not writable, or a
            path too long; nothing is written.
    """
    check_name(kind, name)
    texts = {folder / relative: text for relative, text in files(kind, name).items()}
    problem = _folder_problem(folder, list(texts))
    if problem:
        raise UserError(problem)
    made: list[Path] = []  # the folders and files written so far, taken back if a write fails
    try:
        for path, text in texts.items():
            for parent in reversed(path.parents):
                if not parent.is_dir():
                    parent.mkdir()
                    made.append(parent)
            path.write_text(text)
            made.append(path)
    except OSError as exc:  # a read-only file system, a full disk, root's permissions aside
        for done in reversed(made):
            done.rmdir() if done.is_dir() else done.unlink()
        raise UserError(f"--dir '{folder}': cannot write '{exc.filename}' ({exc.strerror}); nothing was written, "
                        "name a writable folder with --dir") from None
    return list(texts)
