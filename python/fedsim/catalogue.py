"""What an experiment can name: the catalogues ``fedsim strategies``, ``fedsim models``,
``fedsim datasets`` and ``fedsim schemes`` print, as tables.

Each is a pandas DataFrame indexed by name where pandas is installed, else a list of dicts. A
row holds the component's line of description (``about``, or an algorithm's ``paper`` and
whether it runs ``asynchronous``-ly), its ``params`` (by name: ``default``, ``None`` where
required, and ``doc``) and the ``crate`` that registered it.
"""

from __future__ import annotations

import json
from typing import Any

from . import _fedsim


def _table(kind: str) -> Any:
    rows = json.loads(_fedsim.catalogue(kind))
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame.from_records(rows).set_index("name")


def strategies() -> Any:
    """The algorithms a ``strategy`` section names, with the paper each follows."""
    return _table("strategies")


def models() -> Any:
    """The architectures a ``model`` section names."""
    return _table("models")


def datasets() -> Any:
    """The data sets a ``data`` section names."""
    return _table("datasets")


def schemes() -> Any:
    """The partition schemes a ``partition`` section names."""
    return _table("schemes")
