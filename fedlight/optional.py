"""Optional dependencies: the packages only some runs need, and the one-line error naming the extra
that installs them.

scikit-learn is the ``sklearn`` extra (``pyproject.toml``): only CF-CL's K-means
(``exchange.policy=smart``) and the diabetes table with its fairness probe use it. wandb and
mlflow are the ``loggers`` extra: only a run whose ``loggers`` name them imports them. Hugging Face
``datasets`` is the ``hf`` extra: only ``data.name=hf_disk`` reads through it.
"""

from __future__ import annotations

import importlib
import importlib.util

from fedlight.errors import UserError

SKLEARN_INSTALL = "pip install 'fedlight[sklearn]'"
LOGGERS_INSTALL = "pip install 'fedlight[loggers]'"
HF_INSTALL = "pip install 'fedlight[hf]'"
# a logger of the recipe's ``loggers`` -> the module it needs beyond fedlight's own dependencies
LOGGER_MODULES = {"wandb": "wandb", "mlflow": "mlflow"}


def require_sklearn(needed_by: str) -> None:
    """Raise a one-line UserError naming ``needed_by`` and the extra to install unless scikit-learn imports.

    Called where the recipe is checked, before any data is read or the run folder is touched, so
    a run without it stops with nothing written instead of failing at its first K-means.
    """
    try:
        importlib.import_module("sklearn")
    except ImportError:
        raise UserError(f"{needed_by} needs scikit-learn, which is not installed; {SKLEARN_INSTALL}") from None


def require_loggers(names: list[str]) -> None:
    """Raise a one-line UserError naming the first of the recipe's ``loggers`` whose package is not
    installed, and the extra that installs it; looked up without importing (wandb takes seconds).

    Called where the recipe is checked, so such a run stops before anything is trained or written.
    """
    for name in names:
        module = LOGGER_MODULES.get(name)
        if module is not None and importlib.util.find_spec(module) is None:
            raise UserError(f"loggers: {name} needs the {module} package, which is not installed; {LOGGERS_INSTALL} "
                            f"(or drop {name} from loggers)")


def require_hf_datasets(data_name: str) -> None:
    """Raise a one-line UserError naming the ``hf`` extra unless ``datasets`` can be imported, where
    ``data_name`` (``data.name``) is ``hf_disk``; looked up without importing (it takes seconds)."""
    if data_name == "hf_disk" and importlib.util.find_spec("datasets") is None:
        raise UserError(f"data.name=hf_disk needs the Hugging Face datasets package, which is not installed; "
                        f"{HF_INSTALL}")
