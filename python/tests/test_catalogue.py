"""The catalogues as tables: what the command line lists, row for row."""

import subprocess
import sys

import pytest

import fedsim
from test_run import fedsim_binary


def listed_by_the_command_line(command):
    """The names `fedsim COMMAND` prints: each entry opens with its name alone on a line,
    below a header of sentences."""
    out = subprocess.run([fedsim_binary(), command], check=True, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line and " " not in line]


@pytest.mark.parametrize(
    "table, command",
    [
        (fedsim.strategies, "strategies"),
        (fedsim.models, "models"),
        (fedsim.datasets, "datasets"),
        (fedsim.schemes, "schemes"),
    ],
)
def test_each_catalogue_lists_what_the_command_line_lists(table, command, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    # What other tests registered from Python (strategies, data sets) comes after the
    # built-ins, which the command line lists alone.
    rows = [row for row in table() if not row["crate"].endswith("(Python)")]
    assert [row["name"] for row in rows] == listed_by_the_command_line(command)
    assert all(row["crate"] == "fedsim" for row in rows)


def test_a_strategy_row_has_its_paper_and_parameters_with_defaults():
    rows = {row["name"]: row for row in _without_pandas(fedsim.strategies)}
    assert rows["fedprox"]["params"]["mu"]["default"] == 0.01
    assert "Li" in rows["fedprox"]["paper"]
    assert rows["fedasync"]["asynchronous"] and not rows["moon"]["asynchronous"]


def test_the_catalogues_are_dataframes_with_pandas():
    pytest.importorskip("pandas", reason="tests/python.rs installs pandas")
    table = fedsim.strategies()
    assert "fedavg" in table.index
    assert table.loc["fedprox", "params"]["mu"]["default"] == 0.01


def _without_pandas(table):
    saved = sys.modules.get("pandas")
    sys.modules["pandas"] = None
    try:
        return table()
    finally:
        if saved is None:
            del sys.modules["pandas"]
        else:
            sys.modules["pandas"] = saved
