"""Sweeps and their comparison reports.

A sweep plays a grid of runs (the command line's ``fedsim sweep``) and ends with a report: a
table with one row per configuration, its seeds aggregated, and charts of the configurations
side by side. In a notebook a :class:`Report` shows itself, table and charts, inline.
"""

from __future__ import annotations

import csv
import html
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _fedsim
from .errors import InputError
from .experiment import PathLike, _overrides


class Chart:
    """One of a report's charts: an SVG drawing, shown inline by Jupyter."""

    def __init__(self, name: str, svg: str) -> None:
        self.name = name
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg

    def __repr__(self) -> str:
        return f"Chart({self.name!r})"


class Report:
    """A report folder, read: ``summary.csv`` as :attr:`table`, ``plots/*.svg`` as
    :attr:`charts`.

    Attributes:
        folder: the report folder (a sweep's folder, or ``fedsim report``'s ``--out``).
        rows: the table's rows, one dict per configuration (numbers as floats).
        charts: the charts by name (``accuracy-by-round``, ``accuracy-by-sim-time``, ...).
        failed: the runs that failed, each with its error, where the sweep said so.
    """

    def __init__(self, folder: Path, failed: Sequence[str] = ()) -> None:
        self.folder = folder
        with open(folder / "summary.csv", newline="") as table:
            self.rows: List[Dict[str, Any]] = [
                {key: _number(value) for key, value in row.items()}
                for row in csv.DictReader(table)
            ]
        plots = folder / "plots"
        self.charts: Dict[str, Chart] = {
            path.stem: Chart(path.stem, path.read_text())
            for path in sorted(plots.glob("*.svg"))
        }
        self.failed = list(failed)

    @classmethod
    def open(cls, folder: PathLike) -> "Report":
        """Reads the report in ``folder``."""
        return cls(Path(folder))

    @property
    def table(self) -> Any:
        """The table as a pandas DataFrame indexed by configuration, where pandas is
        installed; else the rows themselves."""
        try:
            import pandas
        except ImportError:
            return self.rows
        return pandas.DataFrame.from_records(self.rows).set_index("configuration")

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(str(key))}</th>" for key in self.rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_shown(v))}</td>" for v in row.values()) + "</tr>"
            for row in self.rows
        )
        charts = "".join(f"<figure>{chart.svg}</figure>" for chart in self.charts.values())
        failed = "".join(f"<li>{html.escape(line)}</li>" for line in self.failed)
        return (
            f"<h3>fedsim report: {html.escape(self.folder.name)}</h3>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            + (f"<p>Failed runs:</p><ul>{failed}</ul>" if failed else "")
            + charts
        )

    def __repr__(self) -> str:
        return (
            f"Report({str(self.folder)!r}: {len(self.rows)} configurations, "
            f"{len(self.charts)} charts)"
        )


def sweep(
    source: Union[PathLike, Mapping[str, Any]],
    out: Optional[PathLike] = None,
    jobs: int = 1,
    overrides: Optional[Mapping[str, Any]] = None,
    **fields: Any,
) -> Report:
    """Plays a sweep (as ``fedsim sweep``) and returns its report.

    Args:
        source: a sweep file (a base experiment, variants and a grid), or a dict of the same
            fields; a dict's base, if a path, starts from the current folder.
        out: the sweep folder (default ``runs/NAME``); rerunning into it skips finished runs.
        jobs: runs played at once.
        overrides, fields: changes to every run's base experiment, as ``fedsim sweep --set``
            (dotted paths, or keywords with ``__`` for the dots), before each run's variant and
            axes.

    Raises:
        InputError: the sweep file, a run's experiment or an override is at fault; nothing ran.
        KeyboardInterrupt: Ctrl-C stopped the runs in flight at a round boundary; calling
            ``sweep`` again continues them.
    """
    assignments = _overrides(overrides, fields)
    folder = None if out is None else os.fspath(out)
    if isinstance(source, Mapping):
        label = os.path.join(os.getcwd(), "<dict>")
        text = json.dumps(source, allow_nan=False)
        outcome = _fedsim.sweep(label, folder, jobs, assignments, text)
    else:
        outcome = _fedsim.sweep(os.fspath(source), folder, jobs, assignments)
    failed = [f"{name}: {error}" for name, error in outcome["failed"]]
    return Report(Path(outcome["folder"]), failed)


def report(
    folders: Union[PathLike, Sequence[PathLike]],
    out: Optional[PathLike] = None,
    target: Optional[float] = None,
) -> Report:
    """Writes the report of the finished runs in ``folders`` (run folders, or folders of them)
    to ``out`` (as ``fedsim report``; default: the one folder given) and returns it.

    Args:
        target: a test accuracy, as a fraction in (0, 1]: the table gives the round and the
            simulated time each configuration first reached it.
    """
    if isinstance(folders, (str, os.PathLike)):
        folders = [folders]
    folders = [os.fspath(folder) for folder in folders]
    if out is None:
        if len(folders) != 1:
            raise InputError("several folders need out=FOLDER for the report")
        out = folders[0]
    if target is not None and not 0 < target <= 1:
        raise InputError(f"target must be a fraction in (0, 1], e.g. 0.9; got {target}")
    written = _fedsim.report(folders, os.fspath(out), target)
    return Report(Path(written["folder"]), written["failed"])


def _number(text: str) -> Any:
    """A table cell: a float where it reads as one, else the text (empty for none)."""
    try:
        return float(text)
    except ValueError:
        return text


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
