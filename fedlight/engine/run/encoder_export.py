"""``fedlight export RUN_DIR``: a finished run's trained encoder as one file that needs no recipe.

The run's last checkpoint holds the global model's raw tensors (every shared module, keyed by the
method's module names) and, for methods whose clients keep layers of their own, the clients'
states (in ``last.pt``, or as client state files beside it). The export keeps only the backbone:
its global tensors, each client's own backbone tensors, and what rebuilds it (the backbone's name,
options and input shape, and the normalisation of the run's training images, from results.json's
``inputs``, so the data need not be on the machine; a run older than ``inputs`` reads its data again);
``fedlight.models.encoder_file`` holds the format and reads it back.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import torch

from fedlight import __version__
from fedlight.atomic_files import atomic_write_bytes, leftover_pattern, remove_leftovers
from fedlight.data.domains import shift_like_run
from fedlight.data.sources import load_dataset, take_subset
from fedlight.engine.run.own_records import check_output_file
from fedlight.engine.state import client_state_files as files
from fedlight.engine.state.checkpoint import read_checkpoint
from fedlight.engine.state.run_files import CHECKPOINT, RESULTS
from fedlight.errors import UserError
from fedlight.eval.encoder_probe import evaluation_record
from fedlight.invocation import fedlight_command
from fedlight.models.encoder_file import FORMAT, FORMAT_VERSION, State, content_digest

BACKBONE = re.compile(r"(?:objective\.)*backbone\.")  # the backbone's keys in a method (wrappers add objective.)


def export_encoder(run_dir: str | Path, out: str | Path | None = None,
                   overwrite: bool = False) -> tuple[Path, dict[str, Any]]:
    """Write the encoder of the finished run in ``run_dir`` to ``out`` (default ``run_dir/encoder.pt``),
    replacing a file there only with ``overwrite``, and never a run's or a sweep's own record.

    Returns:
        (the file written, what it holds).

    Raises:
        UserError: one line naming the file at fault, for ``out`` taken (a record, a folder, or a file
            without ``overwrite``), a run folder with no results, an unfinished run, a missing or damaged
            checkpoint, an ``inputs`` out of shape, or (for a run whose results.json predates ``inputs``)
            data no longer where it was.
    """
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "encoder.pt"
    check_output_file(out, "--out", overwrite)
    results = _finished_results(run_dir)
    ckpt = _last_checkpoint(run_dir, results["rounds_completed"])
    record = results["recipe"]
    inputs = _recorded_inputs(results, run_dir / RESULTS) or _inputs_from_data(record)
    spec = (record.get("resolved") or {}).get("backbone") or {"name": record["model"]["backbone"]}
    options = {k: v for k, v in spec.items() if k not in ("name", "feature_dim", "parameters")}  # factory's own
    global_part, local_parts = _backbone_tensors(ckpt, run_dir / CHECKPOINT)
    provenance = results.get("provenance") or {}
    export = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "fedlight_version": __version__,
        "backbone": {"name": spec["name"], "options": options, "channels": inputs["channels"],
                     "image_size": inputs["image_size"], "feature_dim": spec.get("feature_dim"),
                     "parameters": spec.get("parameters")},
        "normalize": inputs["normalize"],
        "state_dict": global_part, "local_parts": local_parts,
        "run": {"dir": str(run_dir.resolve()), "rounds_completed": results["rounds_completed"],
                "method": record["method"]["name"], "data": record["data"]["name"],
                "commit": provenance.get("commit"), "dirty": provenance.get("dirty"),
                "trained_with": provenance.get("fedlight"), "final": results.get("final"),
                "evaluation": evaluation_record(record)},  # what fedlight.probe_encoder scores it with
    }
    _write(out, export)
    return out, export


def _finished_results(run_dir: Path) -> dict[str, Any]:
    """results.json of a run that trained all its rounds."""
    path = run_dir / RESULTS
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        why = "missing" if isinstance(exc, FileNotFoundError) else "unreadable"
        raise UserError(f"'{path}' is {why}: pass the run folder (run.dir) of a run fedlight fit finished") from None
    if not isinstance(results, dict) or not isinstance(results.get("recipe"), dict):
        raise UserError(f"'{path}' is not a fedlight results.json: pass the run folder (run.dir) of a run fedlight "
                        "fit finished")
    done, rounds = results.get("rounds_completed"), results["recipe"].get("rounds")
    if done != rounds or results.get("final") is None:  # all rounds but no final evaluation: killed during it
        raise UserError(f"run folder '{run_dir}' has finished {done} of its {rounds} rounds"
                        f"{' but not its final evaluation' if done == rounds else ''}: finish it first with "
                        + fedlight_command("fit", "--recipe", str(run_dir / "recipe.yaml"), "--resume"))
    return results


def _last_checkpoint(run_dir: Path, rounds_done: int) -> dict[str, Any]:
    """``last.pt``, intact and of the round results.json's final evaluation scored (never ``last.pt.prev``)."""
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise UserError(f"run folder '{run_dir}' has no checkpoint '{path}': rerun the run, or copy its "
                        "checkpoints/ folder back from a backup")
    ckpt, problem = read_checkpoint(path)
    if ckpt is None or ckpt.get("rounds_completed") != rounds_done or "global" not in ckpt:
        problem = problem or f"is not the checkpoint of round {rounds_done}, which results.json reports"
        raise UserError(f"checkpoint '{path}' {problem}: copy the run's checkpoints/ folder back from a backup, "
                        "or rerun the run")
    if ckpt.get("partial") is not None:  # a resume that grew the run was stopped between round R + 1's clients:
        # the global model is round R's, but the clients trained since keep round R + 1's local parts
        raise UserError(f"checkpoint '{path}' holds a round stopped between its clients (the run was resumed with "
                        "more rounds and interrupted): finish it first with "
                        + fedlight_command("fit", "--recipe", str(run_dir / "recipe.yaml"), "--resume"))
    return ckpt


def _recorded_inputs(results: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """results.json's ``inputs``, checked (None for a run that predates them)."""
    inputs = results.get("inputs")
    if inputs is None:
        return None
    try:
        channels, size = inputs["channels"], inputs["image_size"]
        mean, std = (torch.tensor(inputs["normalize"][k], dtype=torch.float64) for k in ("mean", "std"))
        well_formed = (type(channels) is int and type(size) is int and min(channels, size) >= 1
                       and mean.shape == std.shape == (channels,) and bool(mean.isfinite().all())
                       and bool((std > 0).all() and std.isfinite().all()))
    except (TypeError, KeyError, ValueError, RuntimeError):  # not a mapping, a key missing, values not numbers
        well_formed = False
    if not well_formed:
        raise UserError(f"'{path}' has a malformed 'inputs' (it needs channels, image_size and normalize's mean and "
                        "std, one finite value a channel, std above 0): restore the file, or delete its 'inputs' "
                        "to read them from the run's data again")
    return inputs


def _inputs_from_data(record: dict[str, Any]) -> dict[str, Any]:
    """results.json's ``inputs`` for a run that predates them: from the run's training images (its
    ``data.subset`` of them, shifted by its ``partition.domains``), read again from ``data.root``."""
    d = record["data"]
    columns = (d.get("image_column", "image"), d.get("label_column", "label"), d.get("group_column"))
    data = take_subset(load_dataset(d["name"], d["root"], d["download"], record["seed"], columns), d.get("subset"),
                       d.get("test_subset"), record["seed"])
    data = shift_like_run(data, record["partition"].get("domains") or [], record["clients"]["num"], record["seed"])
    mean, std = data.mean_std()
    return {"channels": data.channels, "image_size": data.image_size,
            "normalize": {"mean": mean.tolist(), "std": std.tolist()}}


def _backbone_tensors(ckpt: dict[str, Any], checkpoint: Path) -> tuple[State, dict[int, State]]:
    """(the global model's backbone tensors, client -> the backbone tensors it keeps of its own),
    keyed like the backbone's ``state_dict``."""
    prefixes = {m.group(0) for m in map(BACKBONE.match, ckpt["global"]) if m}
    states = {int(c): s for c, s in (ckpt.get("clients") or {}).items()}
    folder = checkpoint.parent / files.FOLDER
    for client, (version, digest) in files.recorded(ckpt, folder).items():
        path = folder / files.file_name(client, version, digest)
        problem = files.damage(path, digest)
        if problem:
            raise UserError(f"client state file '{path}' {problem}: copy the run's checkpoints/ folder back from a "
                            "backup, or rerun the run")
        states[client] = files.read_state(path, digest)
    prefixes |= {m.group(0) for s in states.values() for m in map(BACKBONE.match, s) if m}
    if len(prefixes) != 1:
        raise UserError(f"checkpoint '{checkpoint}' holds {'no' if not prefixes else 'more than one'} backbone "
                        f"({', '.join(sorted(prefixes)) or 'no key starts with backbone.'}): fedlight export "
                        "exports a method's one backbone")
    prefix = prefixes.pop()

    def backbone(state: State, skip: State) -> State:
        inside = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        return {k: v.cpu() for k, v in inside.items() if k not in skip}

    global_part = backbone(ckpt["global"], {})
    local = {c: backbone(s, global_part) for c, s in sorted(states.items())}
    return global_part, {c: part for c, part in local.items() if part}


def _write(out: Path, export: dict[str, Any]) -> None:
    """``torch.save`` of ``export``, with its digest (``content_digest``), to ``out`` atomically."""
    buffer = io.BytesIO()
    torch.save({**export, "sha256": content_digest(export)}, buffer)
    if out.parent.is_dir():  # an earlier export of this file killed mid-write (SIGKILL) left its temporary file
        remove_leftovers(out.parent, leftover_pattern(out.name))
    atomic_write_bytes(out, buffer.getvalue(), then="run fedlight export again (--out names another file)")
