"""Optional dependencies: the packages only some runs need, and the one-line error naming the extra
that installs them.

scikit-learn is the ``sklearn`` extra (``pyproject.toml``): only CF-CL's K-means
(``exchange.policy=smart``) and the diabetes table with its fairness probe use it.
"""

from __future__ import annotations

import importlib

from fedlight.errors import UserError

SKLEARN_INSTALL = "pip install 'fedlight[sklearn]'"


def require_sklearn(needed_by: str) -> None:
    """Raise a one-line UserError naming ``needed_by`` and the extra to install unless scikit-learn imports.

    Called where the recipe is checked, before any data is read or the run folder is touched, so
    a run without it stops with nothing written instead of failing at its first K-means.
    """
    try:
        importlib.import_module("sklearn")
    except ImportError:
        raise UserError(f"{needed_by} needs scikit-learn, which is not installed; {SKLEARN_INSTALL}") from None
