"""An exported encoder: one file that rebuilds a run's trained backbone without its recipe.

``fedlight export RUN_DIR`` writes it (``fedlight.engine.run.encoder_export``); ``load_encoder`` reads
it back. The file is ``torch.save`` of a dict of plain tensors and plain Python values, so it loads
with ``torch.load(weights_only=True)`` and runs no code::

    {"format": "fedlight-encoder", "format_version": 1,
     "backbone": {"name", "options" (its factory's further options), "channels", "image_size",
                  "feature_dim", "parameters"},
     "normalize": {"mean": [C floats], "std": [C floats]},   # the training images' statistics in [0, 1]
     "state_dict": {key: tensor},                 # the global model's backbone tensors
     "local_parts": {client: {key: tensor}},      # backbone tensors each client keeps (LG-FedAvg, FedBN)
     "fedlight_version": str, "run": {"dir", "rounds_completed", "method", "data", "commit", "dirty",
                                      "trained_with", "final", "evaluation"},  # fedlight.probe_encoder's protocol
     "sha256": str}                               # content_digest of the rest (files exported since 2026-11-28)
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedlight.catalog import BACKBONES
from fedlight.errors import UserError, warnings_if_it_works

FORMAT = "fedlight-encoder"
FORMAT_VERSION = 1
State = dict[str, torch.Tensor]


class ExportedEncoder(nn.Module):
    """A backbone behind the normalisation it was trained and evaluated with.

    Args:
        backbone: the rebuilt encoder, normalised (B, C, H, W) -> (B, D).
        mean: (C,) per-channel mean of the run's training images in [0, 1].
        std: (C,) per-channel std.

    Shapes: (B, C, H, W) uint8 images, or floats in [0, 1] -> (B, D) features (``feature_dim``).
    """

    def __init__(self, backbone: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.backbone = backbone
        self.register_buffer("mean", mean.view(1, -1, 1, 1))
        self.register_buffer("std", std.view(1, -1, 1, 1))
        self.feature_dim = int(backbone.feature_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            x = x.float().div_(255)
        return self.backbone((x - self.mean) / self.std)


def content_digest(export: dict[str, Any]) -> str:
    """sha256 of an export's content: its plain values as sorted JSON, then every tensor's place, dtype,
    shape and bytes in key order (the ``sha256`` entry itself left out).

    Written by hand because ``torch.load`` reads a flipped bit inside a tensor (or a float) as another
    number, and a checkpoint's ``.sha256`` listing beside the file is left behind when an export is carried
    away: the file holds its own check. Its bytes as ``torch.save`` writes them are no basis for one (they
    may differ between torch versions), its content is.
    """
    digest = hashlib.sha256()
    plain = {k: v for k, v in export.items() if k not in ("state_dict", "local_parts", "sha256")}
    digest.update(json.dumps(plain, sort_keys=True, default=str).encode())
    tensors = [("global", export["state_dict"])] + [(f"client {c}", part) for c, part in export["local_parts"].items()]
    for scope, state in sorted(tensors, key=lambda item: item[0]):
        for key, tensor in sorted(state.items()):
            digest.update(f"{scope}/{key}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def read_export(path: str | Path) -> dict[str, Any]:
    """The export file at ``path``, checked to be one.

    Raises:
        UserError: one line naming the file when it is missing, does not load, is no export, or fails
            its digest.
    """
    path = Path(path)
    make = "make one with: fedlight export RUN_DIR --out FILE"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"encoder file '{path}' cannot be read ({exc.strerror}); {make}") from None
    try:
        with warnings_if_it_works():
            found = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # truncation and corruption surface as many exception types
        raise UserError(f"encoder file '{path}' does not load ({type(exc).__name__}: truncated, corrupt or not a "
                        f"torch file); {make}") from None
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        what = "a run checkpoint" if isinstance(found, dict) and "rounds_completed" in found else "not one"
        raise UserError(f"'{path}' is no fedlight encoder export ({what}); {make}")
    if found.get("format_version", 0) > FORMAT_VERSION:
        raise UserError(f"encoder file '{path}' has format version {found['format_version']}, newer than this "
                        f"fedlight reads ({FORMAT_VERSION}): upgrade fedlight (it was written by fedlight "
                        f"{found.get('fedlight_version')})")
    problem = layout_problem(found)
    if problem:
        raise UserError(f"encoder file '{path}' is damaged: {problem}; copy it again from where it was made, or {make}")
    if "sha256" in found and found["sha256"] != content_digest(found):  # an export older than the digest has none
        raise UserError(f"encoder file '{path}' fails its sha256 check (its tensors or values changed since it was "
                        f"written: a damaged copy); copy it again from where it was made, or {make}")
    return found


def _kind(value: Any) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"


def layout_problem(export: dict[str, Any]) -> str | None:
    """What is out of shape in an export's content (the module docstring's layout), or None."""
    for key in ("backbone", "normalize", "state_dict", "local_parts"):
        if not isinstance(export.get(key), dict):
            return f"'{key}' is {_kind(export.get(key))}, not a mapping"
    spec, normalize = export["backbone"], export["normalize"]
    for key, kind in (("name", str), ("options", dict), ("channels", int), ("image_size", int)):
        if not isinstance(spec.get(key), kind) or isinstance(spec.get(key), bool):
            return f"'backbone.{key}' is {_kind(spec.get(key))}, not {'a mapping' if kind is dict else f'a {kind.__name__}'}"
    for key in ("mean", "std"):
        values = normalize.get(key)
        if (not isinstance(values, list) or len(values) != spec["channels"]
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            return f"'normalize.{key}' is {_kind(values)}, not a list of {spec['channels']} numbers (one a channel)"
    parts = {"state_dict": export["state_dict"], **{f"local_parts[{c!r}]": p for c, p in export["local_parts"].items()}}
    for where, state in parts.items():
        if where != "state_dict" and not isinstance(state, dict):
            return f"'{where}' is {_kind(state)}, not a mapping"
        wrong = next((k for k, v in state.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
        if wrong is not None:
            return f"'{where}' maps {wrong!r} to {_kind(state[wrong])}, not a tensor"
    return None


def load_local_parts(path: str | Path) -> dict[int, State]:
    """Each client's own backbone tensors in an export (LG-FedAvg's local layers, FedBN's
    normalisation), keyed like the backbone's ``state_dict``; empty when every layer is global."""
    return {int(c): dict(part) for c, part in read_export(path)["local_parts"].items()}


def load_encoder(path: str | Path, device: str | torch.device = "cpu", client: int | None = None) -> ExportedEncoder:
    """Rebuild an exported encoder, in eval mode, on ``device``.

    Args:
        path: a file ``fedlight export`` wrote.
        device: where the encoder's tensors go.
        client: rebuild this client's encoder (the global tensors plus its local part), for a run
            whose clients keep backbone layers of their own; None: the global encoder.

    Returns:
        The encoder: (B, C, H, W) uint8 images, or floats in [0, 1] -> (B, D) features; its
        ``backbone`` takes images normalised with its ``mean`` and ``std``.

    Raises:
        UserError: one line, for a file that is no export, a client without a local part, or a
            global encoder some of whose layers only the clients hold.
    """
    found = read_export(path)
    spec, local = found["backbone"], found["local_parts"]
    state = dict(found["state_dict"])
    if client is not None:
        if client not in local:
            raise UserError(f"encoder file '{path}' holds no local part of client {client}; clients with one: "
                            f"{_listed(local) or 'none (every layer is global: leave client out)'}")
        state.update(local[client])
    if spec["name"] not in BACKBONES:
        raise UserError(f"encoder file '{path}' needs backbone '{spec['name']}', which this Python does not have; "
                        "install the package that adds it (fedlight methods lists the backbones)")
    try:
        net = BACKBONES[spec["name"]](spec["channels"], spec["image_size"], **spec["options"])
    except (TypeError, ValueError) as exc:  # an option the factory does not take, or a value it cannot use
        raise UserError(f"encoder file '{path}' builds backbone '{spec['name']}' with options {spec['options']}, "
                        f"which this fedlight's refuses ({exc}); load it with fedlight "
                        f"{found.get('fedlight_version')}, which wrote it") from None
    missing = [k for k in net.state_dict() if k not in state]
    if missing and client is None and local:
        raise UserError(f"encoder file '{path}': the clients keep backbone tensors such as '{missing[0]}' of their "
                        f"own, so there is no global encoder; load a client's with client=N (N in {_listed(local)})")
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:  # missing, unexpected or mis-shaped tensors
        detail = str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else str(exc)
        raise UserError(f"encoder file '{path}' does not fit backbone '{spec['name']}' of this fedlight ({detail}); "
                        f"load it with fedlight {found.get('fedlight_version')}, which wrote it") from None
    normalize = found["normalize"]
    encoder = ExportedEncoder(net, torch.tensor(normalize["mean"]), torch.tensor(normalize["std"]))
    return encoder.to(device).eval()


def _listed(local: dict[int, Any]) -> str:
    """``0, 1, 2, ... 9``: the clients with a local part, the first few and the last."""
    clients = sorted(local)
    return ", ".join(map(str, clients[:5])) + (f", ... {clients[-1]}" if len(clients) > 5 else "")
