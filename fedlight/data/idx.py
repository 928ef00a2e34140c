"""Reader for the IDX format of MNIST-like datasets (plain or gzip-compressed).

Written by hand because torchvision's reader neither opens the ``.gz`` files that Debian's
``dataset-fashion-mnist`` ships nor says which file is truncated.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from fedlight.errors import UserError


def read_idx(path: Path) -> torch.Tensor:
    """The uint8 array stored in IDX file ``path``: images (N, H, W) or labels (N,)."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise UserError(f"data file '{path}' cannot be read ({exc}); re-download or reinstall it") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise UserError(f"data file '{path}' is not an unsigned-byte IDX file; re-download or reinstall it")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise UserError(f"data file '{path}' is truncated (incomplete header); re-download or reinstall it")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(shape))
    if len(raw) != expected:
        raise UserError(
            f"data file '{path}' has {len(raw)} bytes, its header promises {expected}; "
            "it is truncated or corrupt: re-download or reinstall it"
        )
    return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape).copy())
