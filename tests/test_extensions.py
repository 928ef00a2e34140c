"""Third-party methods through entry points: the documentation's "Write a method" and "Write an aggregator"
(docs/tutorials/), run as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cli_process
from fedlight.errors import UserError
from fedlight.extensions import Table

REPO = Path(__file__).resolve().parents[1]
METHOD, AGGREGATOR, PLUGIN = "write-your-own-method", "write-your-own-aggregator", "write-your-own-plugin"


def example_text(marker: str) -> str:
    """The one documentation page (README.md or under docs/) that holds ``<!-- marker``, from there on."""
    pages = [path.read_text() for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]]
    found = [text for text in pages if f"<!-- {marker}" in text]
    assert len(found) == 1, f"<!-- {marker}: on {len(found)} documentation pages, not 1"
    return found[0][found[0].index(f"<!-- {marker}"):]


def readme_example(marker: str, group: str = "fedlight.methods") -> tuple[str, str]:
    """The documented example module after ``<!-- marker`` and its entry-point line (``name = "module:attr"``)."""
    after = example_text(marker)
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    entry = re.search(rf'\[project\.entry-points\."{re.escape(group)}"\]\n(.*?)\n', after).group(1)
    return code, entry


def install_example(site: Path, examples: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Install the documented examples (marker, group) as one package, as ``pip install -e .`` would;
    returns group -> (entry-point name, ``module:attr``)."""
    files, lines, named, package = {}, [], {}, ""
    for marker, group in examples:
        code, entry = readme_example(marker, group)
        name, target = (s.strip().strip('"') for s in entry.split("="))
        package, module = target.split(":")[0].split(".")
        files[f"{module}.py"] = code
        lines.append(f"[{group}]\n{name} = {target}\n")
        named[group] = (name, target)
    install(site, package, files, "".join(lines))
    return named


def install(site: Path, package: str, files: dict[str, str], entry_points: str) -> None:
    """A package importable from ``site`` with its ``.dist-info``, as ``pip install`` would leave it."""
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    for name, text in files.items():
        (site / package / name).write_text(text)
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


def fedlight(site: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m fedlight ARGS`` with the package in ``site`` installed: a process of its own (the
    entry points are looked up as a fresh command does), forked with fedlight already imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    return cli_process.run(list(args), env=env, cwd=REPO)


def test_the_readme_method_trains_through_fedlight_fit(tmp_path: Path, tiny_recipe: Path) -> None:
    site = tmp_path / "site"
    name, target = install_example(site, [(METHOD, "fedlight.methods")])["fedlight.methods"]

    listed = fedlight(site, "methods")
    assert listed.returncode == 0, listed.stderr
    line = next(l for l in listed.stdout.splitlines() if l.strip().startswith(name + " "))
    assert "Decoupled Contrastive Learning" in line and target in line
    assert re.search(r"^\s+simclr\s+\S", listed.stdout, re.M)  # the built-ins are listed too

    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), f"method={{name: {name}, hidden_dim: 32, output_dim: 32}}",
                    "rounds=1", "eval.projector_samples=0")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["recipe"]["method"]["name"] == name and results["rounds_completed"] == 1
    assert results["history"][0]["answered"] == 2 and results["final"]["knn_acc"] is not None

    wrong = fedlight(site, "fit", "--recipe", str(tiny_recipe), "method={name: dlc}", f"run.dir={tmp_path / 'new'}")
    assert wrong.returncode == 2 and f"{name}, " in wrong.stderr and "simclr" in wrong.stderr  # listed among the valid


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    install(site, "broken_pkg", {"bad.py": "raise ImportError('no such thing')\n"},
            "[fedlight.methods]\nbroken = broken_pkg.bad:Nothing\n")
    monkeypatch.syspath_prepend(str(site))  # undone after the test
    table = Table("fedlight.methods", {})
    assert "broken" in table
    with pytest.raises(UserError, match="entry point 'broken' .*broken_pkg.bad:Nothing.* failed to load"):
        table["broken"]


def test_a_builtin_name_wins_over_an_entry_point_and_says_so_once(tmp_path: Path, monkeypatch, capsys) -> None:
    """Before, the package's ``simclr`` was silently never used."""
    from fedlight.extensions import describe

    site = tmp_path / "site"
    install(site, "shadow_pkg", {"m.py": "class X:\n    '''Not the real one.'''\n"},
            "[fedlight.methods]\nsimclr = shadow_pkg.m:X\nextra = shadow_pkg.m:X\n")
    monkeypatch.syspath_prepend(str(site))
    table = Table("fedlight.methods", {"simclr": int, "byol": float})
    assert table["simclr"] is int and table["simclr"] is int and table["byol"] is float
    assert capsys.readouterr().err == ("fedlight: warning: fedlight.methods entry point 'simclr' (shadow_pkg.m:X) is "
                                       "hidden by fedlight's built-in 'simclr', which is used; rename the entry "
                                       "point in the package that declares it to use it\n")  # once, simclr only
    assert list(table) == ["byol", "extra", "simclr"]
    assert table.description("extra") == "Not the real one." and table.origin("extra") == "shadow_pkg.m:X"
    listed = describe({"methods": table}).splitlines()
    assert listed[3].endswith("[hides the entry point shadow_pkg.m:X]") and "hides" not in listed[1]


HALF_EPOCH = '''"""A client schedule from another package: one epoch over the first half of a client's samples."""

from __future__ import annotations

from typing import Any

import torch

from fedlight import ClientSchedule, ClientWork, FederatedModule, Report, ScheduleContext, State, train_client


class HalfEpoch(ClientSchedule):
    """One epoch over the first half of each client's samples."""

    def __init__(self, ctx: ScheduleContext) -> None:
        self.ctx = ctx

    def train(self, module: FederatedModule, client: int, round_: int, generator: torch.Generator,
              private: State, work: float) -> ClientWork:
        c = self.ctx
        half = c.parts[client][:len(c.parts[client]) // 2]
        result = train_client(c.fabric, module, c.images, c.labels, half.to(c.images.device), c.views, 1,
                              c.batch_size, generator)
        return ClientWork(result, float(len(half)))

    def columns(self, round_: int, reports: list[Report], ledger_rows: list[list],
                history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"trained_on": [rep["samples"] for rep in reports],
                "client_sizes": [len(self.ctx.parts[rep["client"]]) for rep in reports]}
'''


def test_a_schedule_from_another_package_is_listed_and_trains(tmp_path: Path, tiny_recipe: Path) -> None:
    site = tmp_path / "site"
    install(site, "half_pkg", {"schedule.py": HALF_EPOCH}, "[fedlight.schedules]\nhalf = half_pkg.schedule:HalfEpoch\n")

    listed = fedlight(site, "methods")
    assert listed.returncode == 0, listed.stderr
    schedules = listed.stdout[listed.stdout.index("client schedules (fedlight.schedules):"):]
    assert re.search(r"^\s+half\s+One epoch over the first half .*\[half_pkg\.schedule:HalfEpoch\]$", schedules, re.M)
    assert re.search(r"^\s+epochs\s+\S", schedules, re.M)  # beside the built-in ones

    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), "local.schedule=half", "rounds=1",
                    "eval.projector_samples=0")
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads((tmp_path / "run" / "results.json").read_text())["history"][0]
    assert row["answered"] == 2  # both clients trained through the package's schedule, on half their samples
    assert row["trained_on"] == [n // 2 for n in row["client_sizes"]] and min(row["client_sizes"]) > 1


def test_every_catalog_name_loads_the_object_it_names() -> None:
    """The catalog names its built-ins as "module:attr" strings (no import until used): each must
    resolve, to a class of the table's kind or a (channels, image_size) backbone factory."""
    from torch import nn

    from fedlight import catalog
    from fedlight.engine.loop.interfaces import ClientSchedule
    from fedlight.methods.federated_module import FederatedModule
    from fedlight.server.aggregator import Aggregator

    for table, kind in ((catalog.METHODS, FederatedModule), (catalog.SERVERS, Aggregator),
                        (catalog.SCHEDULES, ClientSchedule)):
        for name in list(table.builtins):
            assert isinstance(table[name], type) and issubclass(table[name], kind), name
    for name in list(catalog.BACKBONES.builtins):
        net = catalog.BACKBONES[name](1, 28)
        assert isinstance(net, nn.Module) and net.feature_dim > 0, name


def test_fedlight_methods_imports_neither_torch_nor_the_parts() -> None:
    """``fedlight methods`` reads the built-ins' descriptions from their sources: it answers in well
    under a second, where importing every part took seconds."""
    probe = ("import io, sys, contextlib\nfrom fedlight.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()) as out:\n    main(['methods'])\n"
             "heavy = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('fedlight.methods.', "
             "'fedlight.server.', 'fedlight.models.')))\n"
             "print(heavy, 'simclr' in out.getvalue())")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.split() == ["[]", "True"], done.stderr[-2000:]


def test_descriptions_read_from_the_sources_are_the_docstrings() -> None:
    """What ``fedlight methods`` reads without importing is what the imported object's docstring says."""
    from fedlight import catalog

    for table in (catalog.METHODS, catalog.SERVERS, catalog.BACKBONES, catalog.SCHEDULES):
        for name in list(table.builtins):
            from_source = table.description(name)
            doc = (table[name].__doc__ or "").strip()
            assert from_source == " ".join(line.strip() for line in doc.split("\n\n")[0].splitlines()), name
            assert from_source, f"{table.group} {name} has no docstring"


def test_fedlight_methods_shows_first_sentences_wrapped_and_one_name_in_full(capsys) -> None:
    """Long descriptions (Bulyan's is 400 characters) are cut to their first sentence and, on a terminal,
    wrapped under their name; ``fedlight methods NAME`` shows all of it; an unknown name is one line, exit 2."""
    from fedlight.catalog import SERVERS, describe_all
    from fedlight.cli import main
    from fedlight.extensions import first_sentence

    assert first_sentence("Median (Yin et al. 2018, Sec. 3): robust, e.g. for f < n/2. Needs ``n. B``. More.") == (
        "Median (Yin et al. 2018, Sec. 3): robust, e.g. for f < n/2.")
    assert first_sentence("One sentence without a stop") == "One sentence without a stop"
    lines = describe_all(columns=80).splitlines()
    assert max(map(len, lines)) <= 80 and lines[-1].startswith("(each description's first sentence;")
    bulyan = lines.index(next(line for line in lines if line.startswith("  bulyan ")))
    assert lines[bulyan + 1].startswith(" " * 16) and "Needs" not in "".join(lines)  # under the text; cut
    assert main(["methods"]) == 0  # not a terminal: one line each, for grep
    assert "  bulyan        Bulyan over Krum: take" in capsys.readouterr().out
    assert main(["methods", "bulyan"]) == 0
    assert capsys.readouterr().out == f"bulyan (aggregators, fedlight.aggregators):\n  {SERVERS.description('bulyan')}\n"
    assert len(SERVERS.description("bulyan")) > 300 and "Needs ``n >= 4f + 3``" in SERVERS.description("bulyan")
    assert main(["methods", "bulyn"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedlight: error: fedlight methods bulyn: nothing is named so; valid names: ") and \
        err.count("\n") == 1


def test_an_undeclared_module_is_one_line_from_check_recipe_before_any_data(tiny_recipe: Path, monkeypatch) -> None:
    """A method whose sub-module is in none of shared / private / transient modules is refused by
    ``check_recipe`` in one line naming the module and the fix (before: a bare assert after the data
    loaded, gone under ``python -O``); the data root does not exist, so nothing was read."""
    from torch import nn

    from fedlight import catalog
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import check_recipe
    from fedlight.methods.simclr import SimCLR

    class Leaky(SimCLR):
        """SimCLR with an extra head it forgot to declare."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.extra_head = nn.Linear(4, 4)

    monkeypatch.setitem(catalog.METHODS.builtins, "leaky", Leaky)
    recipe = load_recipe(tiny_recipe, ["method={name: leaky}", "data.root=/nonexistent"])
    with pytest.raises(UserError, match=r"Leaky has state in no declared module: extra_head \(extra_head\.bias, "
                                        r"\.\.\.\); add it to the class's private_modules") as refused:
        check_recipe(recipe)
    assert "\n" not in str(refused.value)


def test_the_readme_aggregator_and_plugin_train_through_fedlight_fit(tmp_path: Path, tiny_recipe: Path) -> None:
    """FedAvgM (server momentum) and a round plug-in's history column, from another package, each
    configured by its recipe section and recorded with its defaults in the run's ``resolved``."""
    site = tmp_path / "site"
    named = install_example(site, [(AGGREGATOR, "fedlight.aggregators"), (PLUGIN, "fedlight.plugins")])
    (server, _), (plugin, target) = named["fedlight.aggregators"], named["fedlight.plugins"]

    listed = fedlight(site, "methods")
    assert listed.returncode == 0, listed.stderr
    plugins = listed.stdout[listed.stdout.index("round plug-ins (fedlight.plugins):"):]
    assert re.search(rf"^\s+{plugin}\s+The share of the trainable clients .*\[{re.escape(target)}\]$", plugins, re.M)

    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), f"server={{name: {server}, beta: 0.5}}",
                    f"plugins={{{plugin}: {{scale: 1}}}}", "rounds=2", "eval.projector_samples=0")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [row["participation"] for row in results["history"]] == [1.0, 1.0]  # both clients answered
    assert results["final"]["knn_acc"] is not None
    resolved = results["recipe"]["resolved"]
    assert resolved["server"] == {"name": server, "server_lr": 1.0, "beta": 0.5}
    assert resolved["plugins"] == {plugin: {"scale": 1.0}}


def test_a_plugin_section_is_checked_like_a_method_section(tmp_path: Path, tiny_recipe: Path, monkeypatch) -> None:
    from fedlight import catalog
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import check_recipe

    site = tmp_path / "site"
    plugin, _ = install_example(site, [(PLUGIN, "fedlight.plugins")])["fedlight.plugins"]
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(catalog.PLUGINS, "_found", None)  # look for entry points again, with the package
    cases = {f"plugins={{{plugin}: {{scael: 2}}}}": f"unknown recipe key 'plugins.{plugin}.scael' for plugins.{plugin}; "
                                                   f"valid keys: plugins.{plugin}.scale",
             f"plugins={{{plugin}: {{scale: 0}}}}": f"plugins.{plugin}.scale",
             "plugins={nothing: {}}": f"unknown plugins key 'nothing'; valid names: {plugin}",
             f"plugins={{{plugin}: 3}}": f"plugins.{plugin} must be a mapping"}
    for override, message in cases.items():
        with pytest.raises(UserError, match=re.escape(message)):
            check_recipe(load_recipe(tiny_recipe, [override]))
    check_recipe(load_recipe(tiny_recipe, [f"plugins={{{plugin}: null}}"]))  # its defaults


def test_the_public_surface_imports_lazily_and_completely() -> None:
    """``import fedlight`` loads no torch; every name of ``fedlight.__all__`` resolves, and
    ``fedlight.api`` (where they are defined) exports exactly those."""
    probe = ("import sys, fedlight\nbefore = 'torch' in sys.modules\n"
             "objs = [getattr(fedlight, n) for n in fedlight.__all__]\n"
             "from fedlight import api\n"
             "print(before, sorted(api.__all__) == sorted(fedlight.__all__), all(o is not None for o in objs))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr[-2000:]


def test_the_docs_examples_import_only_from_the_public_surface() -> None:
    """Every Python example in the README and docs/ imports fedlight's names from ``fedlight`` itself,
    and each of them is in ``fedlight.__all__``."""
    import ast

    import fedlight

    texts = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    blocks = [block for path in texts for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S)]
    assert len(blocks) >= 3
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedlight"):
                assert node.module == "fedlight", f"from {node.module} import ...: use from fedlight import ..."
                assert {a.name for a in node.names} <= set(fedlight.__all__), [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                assert not [a.name for a in node.names if a.name.startswith("fedlight.")], block[:80]


WRONG_KINDS = '''"""Plug-ins of the wrong kind."""
NOT_A_CLASS = 3


def not_a_module(channels, image_size):
    """A backbone factory that returns no torch module."""
    return "a string"


def not_a_schedule(ctx):
    """A schedule factory that returns no ClientSchedule."""
    return 42
'''


@pytest.mark.parametrize("args, named", [
    (["method={name: three}"], "fedlight.methods entry point 'three'"),
    (["model.backbone=stringy"], "model.backbone=stringy"),
    (["local.schedule=forty_two"], "local.schedule=forty_two"),
], ids=["method-not-a-class", "backbone-not-a-module", "schedule-not-a-schedule"])
def test_a_plug_in_of_the_wrong_kind_is_one_line_before_the_run_folder(tmp_path: Path, tiny_recipe: Path,
                                                                       args: list[str], named: str) -> None:
    site = tmp_path / "site"
    install(site, "wrong_pkg", {"kinds.py": WRONG_KINDS},
            "[fedlight.methods]\nthree = wrong_pkg.kinds:NOT_A_CLASS\n"
            "[fedlight.backbones]\nstringy = wrong_pkg.kinds:not_a_module\n"
            "[fedlight.schedules]\nforty_two = wrong_pkg.kinds:not_a_schedule\n")
    run = tmp_path / "new" / "run"
    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), *args, "rounds=1", f"run.dir={run}")
    assert done.returncode == 2 and done.stderr.count("fedlight: error:") == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and named in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "new").exists()


def test_a_plug_in_that_exits_on_import_is_one_line_not_an_empty_list(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install(site, "exits_pkg", {"m.py": "import sys\nsys.exit(0)\n"}, "[fedlight.methods]\nquits = exits_pkg.m:X\n")
    listed = fedlight(site, "methods")
    assert listed.returncode == 2 and "'quits'" in listed.stderr and "SystemExit" in listed.stderr, listed
    assert listed.stderr.count("\n") == 1 and "Traceback" not in listed.stderr


RAISING = '''"""Plug-ins whose constructors raise."""
from fedlight import Aggregator, RoundPlugin


class Broken(RoundPlugin):
    def __init__(self, ctx, scale: float = 1.0) -> None:
        raise KeyError("no column named scale")


class BrokenServer(Aggregator):
    def __init__(self) -> None:
        raise ValueError("needs a GPU")
'''


@pytest.mark.parametrize("args, named", [
    (["plugins={broken: {}}"], "plugins.broken: fedlight.plugins entry point 'broken' (raising_pkg.m:Broken) raised "
                               "KeyError: 'no column named scale'; fix or uninstall the package that declares it"),
    (["server.name=broken_server"], "server.name=broken_server: fedlight.aggregators entry point 'broken_server' "
                                    "(raising_pkg.m:BrokenServer) raised ValueError: needs a GPU;"),
], ids=["round-plugin", "aggregator"])
def test_a_plug_in_whose_constructor_raises_is_one_line_naming_it(tmp_path: Path, tiny_recipe: Path,
                                                                  args: list[str], named: str) -> None:
    """Before, the plug-in's error came as a 36-line traceback; the run folder is left as it was."""
    site = tmp_path / "site"
    install(site, "raising_pkg", {"m.py": RAISING},
            "[fedlight.plugins]\nbroken = raising_pkg.m:Broken\n[fedlight.aggregators]\nbroken_server = raising_pkg.m:BrokenServer\n")
    run = tmp_path / "new" / "run"
    done = fedlight(site, "fit", "--recipe", str(tiny_recipe), *args, "rounds=1", f"run.dir={run}")
    assert done.returncode == 2 and done.stderr.startswith(f"fedlight: error: {named}"), done.stderr[-3000:]
    assert done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert not (tmp_path / "new").exists()


PAYLOADS_AGGREGATOR = "write-your-own-payloads-aggregator"


def test_the_readme_aggregator_gives_the_same_model_with_two_workers_and_two_processes(tmp_path: Path,
                                                                                       tiny_recipe: Path) -> None:
    """The README's payloads-contract aggregator, installed from another package: 1 x 1, 1 process x 2
    workers and 2 processes x 1 worker end on the same global model, bit for bit."""
    import torch

    after = example_text(PAYLOADS_AGGREGATOR)
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    entry = re.search(r'\[project\.entry-points\."fedlight\.aggregators"\]\n(.*?)\n', after).group(1)
    name, target = (s.strip().strip('"') for s in entry.split("="))
    package, module = target.split(":")[0].split(".")
    assert len(code.strip().splitlines()) <= 30  # about 20 lines of code under its docstring
    site = tmp_path / "site"
    install(site, package, {f"{module}.py": code}, f"[fedlight.aggregators]\n{name} = {target}\n")
    common = ["clients.num=4", "model.backbone=tiny_cnn", "eval.projector_samples=0", "fabric.threads=1",
              f"server={{name: {name}, bound: 0.5}}"]
    for run, extra in (("one", []), ("workers", ["fabric.workers=2"]), ("ranks", ["fabric.devices=2"])):
        done = fedlight(site, "fit", "--recipe", str(tiny_recipe), *common, *extra, f"run.dir={tmp_path / run}")
        assert done.returncode == 0, done.stderr[-2000:]
    one, *others = (torch.load(tmp_path / run / "checkpoints/last.pt", weights_only=True)["global"]
                    for run in ("one", "workers", "ranks"))
    for other in others:
        assert all(torch.equal(one[k], other[k]) for k in one)


class _Seeded:
    """A round plug-in whose context argument is named ``ctx`` and whose own option is ``seed``."""

    def __init__(self, ctx, seed: int = 0) -> None:
        self.seed = seed


@pytest.mark.parametrize("override, says", [
    ("method={name: supervised, num_classes: 3}", "method.num_classes cannot be set: fedlight passes num_classes to "
                                                  "the constructor itself (the data's number of classes); drop "
                                                  "method.num_classes"),
    ("method={name: simclr, backbone: resnet18}", "method.backbone cannot be set: fedlight passes backbone"),
    ("server={name: scaffold, num_clients: 3}", "server.num_clients cannot be set: fedlight passes num_clients to the "
                                                "constructor itself (the clients that train: clients.num, less a public client)"),
    ("server={name: dp_fedavg, seed: 1}", "server.seed cannot be set: fedlight passes seed to the constructor itself "
                                          "(the recipe's seed)"),
    ("plugins={seeded: {ctx: 1}}", "plugins.seeded.ctx cannot be set: fedlight passes ctx to the constructor itself "
                                   "(the run, a PluginContext)"),
], ids=["method-num_classes", "method-backbone", "server-num_clients", "server-seed", "plugin-context"])
def test_an_option_fedlight_passes_itself_is_refused_in_every_section(tiny_recipe: Path, monkeypatch, override: str,
                                                                     says: str) -> None:
    """Before, ``server.seed`` was an "unknown recipe key" although the class names it, and a plug-in's context
    under another name than ``context`` was a recipe option that clashed with the run's."""
    from fedlight import catalog
    from fedlight.config import load_recipe
    from fedlight.engine.run.fit import check_recipe

    monkeypatch.setitem(catalog.PLUGINS.builtins, "seeded", _Seeded)
    with pytest.raises(UserError, match=re.escape(says)):
        check_recipe(load_recipe(tiny_recipe, [override]))
    check_recipe(load_recipe(tiny_recipe, ["plugins={seeded: {seed: 4}}"]))  # fedlight passes plug-ins no seed


MALFORMED = {"no_equals": b"[fedlight.methods]\nthis line has no equals sign\n",
             "latin1": b"[fedlight.methods]\ncaf\xe9 = badpkg.m:Cafe\n"}


def install_malformed(site: Path, text: bytes) -> None:
    """``badpkg``, whose ``entry_points.txt`` is ``text``, beside ``goodpkg``, whose method ``good`` is fine."""
    install(site, "goodpkg", {"m.py": 'class Good:\n    """A good method."""\n'}, "[fedlight.methods]\ngood = goodpkg.m:Good\n")
    install(site, "badpkg", {}, "")
    (site / "badpkg-0.1.dist-info" / "entry_points.txt").write_bytes(text)


def fresh_fedlight(site: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m fedlight ARGS`` started afresh (torch imported by the command, not a fork server)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fedlight", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("damage", sorted(MALFORMED))
def test_a_malformed_entry_points_file_is_skipped_with_one_warning_naming_its_package(tmp_path: Path,
                                                                                      damage: str) -> None:
    install_malformed(tmp_path, MALFORMED[damage])
    listed = fresh_fedlight(tmp_path, "methods")
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == ["good"] for line in listed.stdout.splitlines())  # the other package's still is
    [warning] = listed.stderr.splitlines()
    assert warning.startswith("fedlight: warning: package 'badpkg' has a malformed entry_points.txt")
    mistyped = fresh_fedlight(tmp_path, "methods", "simclrr")  # the "did you mean" listing
    assert mistyped.returncode == 2 and "Traceback" not in mistyped.stderr
    assert [line.split(":")[1] for line in mistyped.stderr.splitlines()] == [" warning", " error"]


def test_a_package_whose_entry_points_stop_import_torch_is_named_in_one_line(tmp_path: Path,
                                                                            tiny_recipe: Path) -> None:
    install_malformed(tmp_path / "site", MALFORMED["no_equals"])
    done = fresh_fedlight(tmp_path / "site", "fit", "--recipe", str(tiny_recipe))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"fedlight: error: package 'badpkg' has a malformed entry_points.txt ({tmp_path}/site/badpkg-0.1.dist-info/"
        "entry_points.txt): line 2 'this line has no equals sign' has no '=', which stops 'import torch'; fix or "
        "uninstall 'badpkg'"]
    assert not (tmp_path / "run").exists()
