"""Command line: ``fedlight fit``, ``sweep``, ``report``, ``methods``, ``recipes``, ``export`` and ``new``
(argument parsing only; the work lives elsewhere).

Torch and Lightning are imported inside the commands that train, after every check that needs
neither (recipe keys and types, data paths, the run folder): those errors come within a second.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from fedlight import __version__, installed_entry_points, stays_local
from fedlight.engine.run import launch
from fedlight.errors import INTERRUPTED_EXIT, PREEMPTED_EXIT, USER_ERROR_EXIT, UserError, one_line
from fedlight.invocation import fedlight_command

PIPE_CLOSED_EXIT = 141  # 128 + SIGPIPE, as a shell reports a command whose reader went away

if TYPE_CHECKING:
    from fedlight.config.schema import Recipe


class _Parser(argparse.ArgumentParser):
    """argparse whose usage mistakes (a clash, a misspelt flag, a value of the wrong type) are one
    line, like every other user error, instead of a usage block: a ``UserError``, exit code 2.
    Abbreviated flags are refused (``--resum`` is no ``--resume``), in every subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message}; see '{self.prog} --help'")

    def unrecognized(self, extra: list[str]) -> NoReturn:
        """Refuse arguments this (sub)command does not take, suggesting the flag a misspelt one meant."""
        flags = [f for action in self._actions for f in action.option_strings]
        near = [m for e in extra if e.startswith("-")
                for m in difflib.get_close_matches(e.split("=")[0], flags, n=1, cutoff=0.8)]
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        self.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


DESCRIPTION = """Simulate federated self-supervised learning (SimCLR, BYOL, FedAvg, FedProx, SCAFFOLD, MOON, ...)
on one machine or a SLURM cluster, from a recipe."""
EXAMPLES = """examples:
  fedlight recipes                                           the recipes fedlight ships
  fedlight fit --recipe quickstart_fmnist                    run one (Ctrl-C stops it; --resume continues)
  fedlight fit --recipe quickstart_fmnist rounds=3 --overwrite
  fedlight sweep --recipe quickstart_fmnist --grid partition.alpha=0.1,1 --seeds 3 --out sweeps/a --executor local
  fedlight report sweeps/a                                   tables and plots of finished runs
  fedlight new method my_method                              a package of your own method (or aggregator, attack)
  fedlight <command> --help                                  a command's options"""


def _parser() -> argparse.ArgumentParser:
    """``fedlight``'s parser: ``--version`` and one subcommand each, built by its own function below."""
    parser = _Parser(prog="fedlight", description=DESCRIPTION, epilog=EXAMPLES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fedlight {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_fit_parser, _sweep_parser, _report_parser, _methods_parser, _recipes_parser, _export_parser,
                _new_parser):
        command = add(sub)
        command.set_defaults(command_parser=command)  # refuses what it does not take, in its own name
    return parser


def _fit_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight fit``: a recipe, its overrides, and whether to resume, overwrite or only print or write it."""
    fit = sub.add_parser("fit", help="run a federated simulation from a recipe")
    fit.add_argument("--recipe", required=True,
                     help="recipe YAML file, or the name of one fedlight ships (fedlight recipes lists them)")
    fit.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. rounds=5 partition.alpha=0.1")
    group = fit.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="continue the run folder from its last checkpoint")
    group.add_argument("--overwrite", action="store_true", help="replace a non-empty run folder")
    fit.add_argument("--print-recipe", action="store_true",
                     help="print the composed recipe (every key at its value, overrides applied) and stop")
    fit.add_argument("--write-recipe", metavar="FILE",
                     help="write it as a self-contained recipe file to edit and run from any folder (--overwrite "
                          "replaces one there), and stop")
    return fit


def _sweep_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight sweep``: recipes or arms, the grid and seeds, the folder, and how to run the tasks."""
    sweep = sub.add_parser("sweep", help="a recipe x a grid x seeds: one SLURM array job, or processes here")
    sweep.add_argument("--recipe", action="append", default=[], dest="recipes",
                       help="base recipe YAML file (or a shipped recipe's name); given several times, an arm each")
    sweep.add_argument("--arm", action="append", default=[], metavar="NAME[=ITEM,...]",
                       help="an arm to compare (repeatable); items: method:CHOICE / server:CHOICE (configs/method, "
                            "configs/server), ~method.KEY (a setting not to carry), KEY=VALUE, a recipe; "
                            "e.g. --arm scaffold=method:scaffold,server:scaffold")
    sweep.add_argument("overrides", nargs="*", help="dotted key=value overrides every task shares, as fit takes them")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                       help="a recipe key and its values (repeatable), e.g. partition.alpha=0.01,1,100")
    sweep.add_argument("--seeds", type=int, default=1, help="seeds per grid point: the recipe's seed and the next ones")
    sweep.add_argument("--out", required=True, help="sweep folder: manifest, recipes, runs, logs, array script")
    sweep.add_argument("--submit", action="store_true", help="call sbatch (otherwise print the command)")
    sweep.add_argument("--resubmit-failed", action="store_true", help="submit every task without final results")
    sweep.add_argument("--slurm-args", default="", help='extra sbatch options, e.g. "--partition=gpu --gres=gpu:1"')
    sweep.add_argument("--max-running", type=int, default=None, metavar="M", help="at most M tasks at once (%%M)")
    sweep.add_argument("--executor", default="slurm", choices=("slurm", "local"),
                       help="slurm: an array job (default); local: run the tasks now, as processes on this machine")
    sweep.add_argument("--parallel", type=int, default=1, metavar="N", help="--executor local: N tasks at once")
    return sweep


def _report_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight report``: the runs to compare, how to group them and what to compare."""
    report = sub.add_parser("report", help="compare finished runs: report.md, .csv and .tex tables, PNG and SVG plots")
    report.add_argument("paths", nargs="+", help="run folders, or folders to search for results.json (a sweep)")
    report.add_argument("--out", default=None, help="where the report goes (default: the one folder given, else ./report)")
    report.add_argument("--group-by", default=None, metavar="KEYS",
                        help="comma-separated recipe keys to group runs by (default: the runs' arm, or every key "
                             "that varies, except how a run executed: seed, fabric.*, run.*, data.root)")
    report.add_argument("--metric", action="append", default=None, metavar="NAME",
                        help="a metric to tabulate and plot (repeatable; linear_probe_acc means every label fraction); "
                             "default: all")
    report.add_argument("--reference", default=None, metavar="ARM",
                        help="the arm (group) compare.md pairs the others with, by name as the report labels it "
                             "(e.g. byol, or alpha=0.1); default: the first")
    report.add_argument("--margin", type=float, default=None, metavar="M",
                        help="also read each difference as equivalent or not within +-M percentage points "
                             "(TOST; fix M before the runs)")
    report.add_argument("--target", action="append", default=None, metavar="METRIC=PERCENT",
                        help="runs with a virtual clock: the accuracy whose virtual hours to reach are reported and "
                             "compared (repeatable, e.g. knn_acc=45); default: the reference arm's mean final value")
    return report


def _methods_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight methods``: what is installed, or one name's whole description."""
    methods = sub.add_parser("methods", help="list every method, aggregator, backbone, client schedule and round "
                             "plug-in, fedlight's and those other packages add through entry points")
    methods.add_argument("name", nargs="?", metavar="NAME", help="show the whole description of this one")
    return methods


def _recipes_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight recipes``: the recipes fedlight ships (no options)."""
    return sub.add_parser("recipes", help="list the recipes fedlight ships, each with its first comment line; "
                          "run one from any folder with fedlight fit --recipe NAME")


def _export_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight export``: a finished run's encoder, and where to write it."""
    export = sub.add_parser("export", help="write a finished run's trained encoder to one file that "
                            "fedlight.load_encoder rebuilds without the recipe")
    export.add_argument("run_dir", metavar="RUN_DIR", help="the run folder (run.dir) of a finished run")
    export.add_argument("--out", default=None, metavar="FILE", help="where to write it (default: RUN_DIR/encoder.pt)")
    export.add_argument("--overwrite", action="store_true", help="replace the file there (never a run's or a "
                        "sweep's own records)")
    return export


def _new_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """``fedlight new``: a package's kind, its name and its folder."""
    new = sub.add_parser("new", help="write a package that adds a method, an aggregator or an attack to fedlight: "
                         "a working example, its entry point and a test (docs/new_package.md)")
    new.add_argument("kind", choices=("method", "aggregator", "attack"), help="what the package adds")
    new.add_argument("name", metavar="NAME", help="its package, module and entry-point name (a Python identifier)")
    new.add_argument("--dir", default=None, metavar="PATH", help="where to write it, a new or empty folder "
                     "(default: ./NAME)")
    return new


# options whose value may itself start with "-" (`--slurm-args "--cpus-per-task=1"`), which argparse
# would otherwise take for an unknown flag
DASH_VALUED = ("--slurm-args",)


def _glue_dash_values(argv: list[str]) -> list[str]:
    """``['--slurm-args', '--time=5']`` -> ``['--slurm-args=--time=5']`` for the ``DASH_VALUED`` options."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in DASH_VALUED:
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _sweep(args: argparse.Namespace) -> int:
    from fedlight.config.bundled import resolve_recipe
    from fedlight.sweep.command import SweepOptions, run_sweep

    options = SweepOptions(args.executor, args.submit, args.resubmit_failed, args.slurm_args, args.max_running,
                           args.parallel)
    try:
        outcome = run_sweep([resolve_recipe(r) for r in args.recipes], args.grid, args.seeds, args.out, options,
                            args.overrides, arms=args.arm)
    except KeyboardInterrupt:  # --executor local: Ctrl-C or SIGTERM, passed on to the tasks as SIGTERM
        if args.executor != "local":
            raise
        print("fedlight: sweep stopped (its running tasks got SIGTERM and keep their last checkpoint); "
              "the same command resumes them", file=sys.stderr)
        return PREEMPTED_EXIT
    for failure in outcome.failed:  # its own error where it printed one (a run folder in use: by which PID)
        print(f"fedlight: {failure.describe()}", file=sys.stderr)
    if outcome.failed:
        print(f"fedlight: {len(outcome.failed)} task(s) failed; fix what each line above says (logs in "
              f"{os.path.join(args.out, 'logs')}), then run the same command to retry them", file=sys.stderr)
        return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    from fedlight.report.write import write_report

    out = args.out or (args.paths[0] if len(args.paths) == 1 else "report")
    group_by = None if args.group_by is None else [k.strip() for k in args.group_by.split(",") if k.strip()]
    written = write_report(args.paths, out, group_by, args.metric, args.reference, args.margin, args.target)
    print(f"wrote {len(written)} files:\n" + "\n".join(f"  {path}" for path in written))
    print("\n" + written[1].read_text(), end="")  # compare.md: the paired comparison, on the console too
    return 0


def _methods(args: argparse.Namespace) -> int:
    from fedlight.catalog import describe_all, describe_one

    columns = shutil.get_terminal_size().columns if sys.stdout.isatty() else None  # a pipe gets one line each
    print(describe_all(columns) if args.name is None else describe_one(args.name, columns))
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from fedlight.config.bundled import describe_recipes

    print(describe_recipes())
    return 0


def _export(args: argparse.Namespace) -> int:
    from fedlight.engine.run.encoder_export import export_encoder

    out, found = export_encoder(args.run_dir, args.out, args.overwrite)
    b, clients = found["backbone"], len(found["local_parts"])
    print(f"wrote {out}: the {b['name']} encoder of round {found['run']['rounds_completed']} "
          f"({b['channels']}x{b['image_size']}x{b['image_size']} images -> {b['feature_dim']} features)"
          + (f", with the local parts of {clients} clients" if clients else "")
          + f"; rebuild it with fedlight.load_encoder('{out}')")
    return 0


def _new(args: argparse.Namespace) -> int:
    from fedlight.new_package import write_package

    folder = Path(args.dir or args.name)
    written = write_package(args.kind, args.name, folder)
    print(f"wrote {len(written)} files:\n" + "\n".join(f"  {path}" for path in written))
    print(f"next: pip install -e {shlex.quote(str(folder))} && pytest {shlex.quote(str(folder))}")
    return 0


def _fit(args: argparse.Namespace) -> int:
    from fedlight.config import load_recipe

    from fedlight.engine.run.preflight import preflight

    recipe = load_recipe(args.recipe, args.overrides)  # recipe errors come before torch is imported
    if args.resume and (args.print_recipe or args.write_recipe is not None):
        raise UserError(f"--resume continues a run, which --{'print' if args.print_recipe else 'write'}-recipe "
                        "does not start; drop one of them")
    if args.print_recipe or args.write_recipe is not None:
        return _show_recipe(recipe, args)
    preflight(recipe, args.resume, args.overwrite)  # and so do those of the data paths and the run folder
    ranks = launch.start_local_ranks(recipe.fabric.devices, recipe.fabric.num_nodes, args.argv)
    code = USER_ERROR_EXIT
    try:
        code = _fit_ranks(recipe, args)
    finally:
        code = launch.finish_local_ranks(ranks, code)
    return code


def _show_recipe(recipe: Recipe, args: argparse.Namespace) -> int:
    """``fit --print-recipe`` / ``--write-recipe``: the composed recipe, nothing run or checked past its names."""
    from fedlight.catalog import check_names
    from fedlight.config.standalone import standalone_text, write_standalone
    from fedlight.engine.run.own_records import refuse_record

    check_names(recipe.method, recipe.server, recipe.model.backbone, recipe.plugins, recipe.faults.attack)
    text = standalone_text(recipe, args.recipe, args.overrides, args.write_recipe or "THIS_FILE.yaml")
    if args.write_recipe is not None:
        refuse_record(Path(args.write_recipe), "--write-recipe")
        write_standalone(text, Path(args.write_recipe), args.overwrite)
        print(f"wrote {args.write_recipe}; run it with: {fedlight_command('fit', '--recipe', args.write_recipe)}",
              file=sys.stderr if args.print_recipe else sys.stdout)
    if args.print_recipe:
        print(text, end="")
    return 0


def _fit_ranks(recipe: Recipe, args: argparse.Namespace) -> int:
    """This process's part of the run (rank 0, or a local rank ``launch`` started)."""
    from fedlight.engine.loop.preemption import Preempted
    from fedlight.engine.run.fit import fit

    try:
        results = fit(recipe, resume=args.resume, overwrite=args.overwrite)
    except Preempted as stop:  # SIGUSR1 / SIGTERM (checkpointed, requeued inside SLURM) or Ctrl-C
        print(f"fedlight: {stop.describe(recipe.run_dir, resume_command(args.argv))}", file=sys.stderr)
        return INTERRUPTED_EXIT if stop.interrupted else PREEMPTED_EXIT
    except KeyboardInterrupt:  # before the run took Ctrl-C in hand, or a second Ctrl-C: stopped at once
        kept = Path(recipe.run_dir, "checkpoints", "last.pt").exists()
        print("fedlight: interrupted; " + (f"the last checkpoint in '{recipe.run_dir}' is kept: continue with: "
                                            f"{resume_command(args.argv)}" if kept else "no checkpoint was saved"),
              file=sys.stderr)
        return INTERRUPTED_EXIT
    if results["final"] and not launch.is_child():
        from fedlight.engine.output.console import final_line

        print(final_line(results))
    return 0


def resume_command(argv: list[str]) -> str:
    """The command that continues the run ``fedlight <argv>`` started: the same, with ``--resume``, as a
    line that runs in the shell it was started from (``fedlight_command``)."""
    return fedlight_command(*[a for a in argv if a not in ("--resume", "--overwrite")], "--resume")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = _parser()
    args, extra = parser.parse_known_args(_glue_dash_values(argv))
    args.argv = argv  # the local ranks a multi-process run starts get the same command
    # overrides may also follow the flags (`fit --recipe r.yaml --resume rounds=5`)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown or (extra and args.command not in ("fit", "sweep")):
        args.command_parser.unrecognized(unknown or extra)
    if args.command in ("fit", "sweep"):
        args.overrides += extra
    if getattr(args, "recipe", None) is not None:  # fit and sweep: a shipped recipe's name is its path
        from fedlight.config.bundled import resolve_recipe

        args.recipe = resolve_recipe(args.recipe)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parse(argv)
        if args.command in ("fit", "sweep", "export", "report"):  # those that import torch
            installed_entry_points.check_torch_can_load()
        return {"fit": _fit, "sweep": _sweep, "report": _report, "methods": _methods,
                "recipes": _recipes, "export": _export, "new": _new}[args.command](args)
    except UserError as exc:
        if not launch.is_child():  # rank 0 says it once
            for problem in getattr(exc, "problems", [str(exc)]):
                print(f"fedlight: error: {one_line(problem)}", file=sys.stderr)
        return USER_ERROR_EXIT
    except KeyboardInterrupt:  # Ctrl-C before a run started (a run says more: _fit_ranks)
        print("fedlight: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT


def run() -> None:
    """The console entry point (``fedlight``, ``python -m fedlight``): ``main``, then exit.

    A command that succeeded ends the process at once: the interpreter's teardown of the
    torch / Lightning / torchmetrics module graph takes 1.6 s on the 2-core CPU (``benchmarks/micro.py``) and does
    nothing for a finished run, whose results, checkpoints and TensorBoard files are
    written and closed by then. Failures and preemptions exit the ordinary way, and a command
    whose output pipe was closed (``| head``) quietly, with exit code 141.
    """
    try:
        code = main()
        sys.stdout.flush()  # where the reader of a pipe has gone (`fedlight report ... | head`), it shows here
    except BrokenPipeError:  # Python's recipe: nothing more to say, and its own flush at exit writes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(PIPE_CLOSED_EXIT)
    if code != 0:
        sys.exit(code)
    logging.shutdown()
    sys.stderr.flush()
    stays_local.clean_up()  # atexit's own call is skipped by the quick exit
    os._exit(0)
