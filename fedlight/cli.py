"""Command line: ``fedlight fit`` (argument parsing only; the work lives in the engine)."""

from __future__ import annotations

import argparse
import sys

from fedlight.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedlight", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="run a federated simulation from a recipe")
    fit.add_argument("--recipe", required=True, help="recipe YAML file (see recipes/)")
    fit.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. rounds=5 partition.alpha=0.1")
    group = fit.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true", help="continue the run folder from its last checkpoint")
    group.add_argument("--overwrite", action="store_true", help="replace a non-empty run folder")
    return parser


def _fit(args: argparse.Namespace) -> int:
    from fedlight.config import load_recipe

    recipe = load_recipe(args.recipe, args.overrides)  # recipe errors come before torch is imported
    from fedlight.engine.fit import fit

    results = fit(recipe, resume=args.resume, overwrite=args.overwrite)
    final, base = results["final"] or {}, results["baseline"] or {}
    if final:
        print(f"final: linear probe {final['linear_probe_acc']:.4f} (random init {base.get('linear_probe_acc', float('nan')):.4f}), "
              f"kNN {final['knn_acc']:.4f} (random init {base.get('knn_acc', float('nan')):.4f}); "
              f"{results['wall_seconds']:.1f} s; run folder {results['recipe']['run']['dir'] or 'runs/' + results['recipe']['name']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # overrides may also follow the flags (`fit --recipe r.yaml --resume rounds=5`)
    unknown = [e for e in extra if e.startswith("-") or "=" not in e]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "fit":
        args.overrides += extra
    try:
        return {"fit": _fit}[args.command](args)
    except UserError as exc:
        print(f"fedlight: error: {exc}", file=sys.stderr)
        return 2
