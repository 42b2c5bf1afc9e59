"""Sweeps and reports from Python: the command line's runs and table, shown inline."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fedsim
from test_run import BREAST_CANCER, fedsim_binary, without_wall_time


def write_sweep(folder: Path) -> Path:
    """Two strategies and two seeds on the breast-cancer table, three rounds each."""
    sweep = {
        "name": "tiny",
        "base": str(BREAST_CANCER),
        "variants": [
            {"name": "fedavg", "set": {"strategy": {"name": "fedavg"}}},
            {"name": "fedprox", "set": {"strategy": {"name": "fedprox", "mu": 0.01}}},
        ],
        "grid": {"seed": [1, 2], "federation.rounds": [3]},
    }
    path = folder / "tiny.json"
    path.write_text(json.dumps(sweep))
    return path


def accuracy_columns(folder: Path):
    """The table's configurations and accuracy figures, without the wall times."""
    with open(folder / "summary.csv", newline="") as table:
        return [
            {k: v for k, v in row.items() if not k.startswith("wall_seconds")}
            for row in csv.DictReader(table)
        ]


def test_a_sweep_gives_the_command_lines_runs_and_table(tmp_path):
    file = write_sweep(tmp_path)
    report = fedsim.sweep(file, tmp_path / "python", jobs=2)
    subprocess.run(
        [fedsim_binary(), "sweep", str(file), "--out", str(tmp_path / "cli"), "--quiet"],
        check=True,
        capture_output=True,
    )
    assert accuracy_columns(report.folder) == accuracy_columns(tmp_path / "cli")
    for run in ["fedavg_rounds-3_seed-1", "fedprox_rounds-3_seed-2"]:
        python = fedsim.Run.open(report.folder / run)
        cli = fedsim.Run.open(tmp_path / "cli" / run)
        assert python.summary["final_model_sha256"] == cli.summary["final_model_sha256"]
        assert without_wall_time(python.records) == without_wall_time(cli.records)
    assert [row["configuration"] for row in report.rows] == ["fedavg", "fedprox"]
    assert all(row["seeds"] == 2 for row in report.rows)
    assert "accuracy-by-round" in report.charts
    assert report.charts["accuracy-by-round"]._repr_svg_().startswith("<svg")


def test_a_report_shows_its_table_and_charts_inline(tmp_path):
    report = fedsim.sweep(write_sweep(tmp_path), tmp_path / "s")
    page = report._repr_html_()
    assert "<table>" in page and "fedprox" in page
    assert page.count("<svg") == len(report.charts) >= 2


def test_overrides_change_every_runs_base(tmp_path):
    report = fedsim.sweep(write_sweep(tmp_path), tmp_path / "s", client__lr=0.02)
    config = json.loads((report.folder / "fedavg_rounds-3_seed-1" / "config.json").read_text())
    assert config["client"]["lr"] == 0.02
    assert config["federation"]["rounds"] == 3


def test_a_rerun_skips_finished_runs_and_a_report_rebuilds_with_a_target(tmp_path):
    file = write_sweep(tmp_path)
    first = fedsim.sweep(file, tmp_path / "s")
    again = fedsim.sweep(file, tmp_path / "s")
    assert accuracy_columns(again.folder) == accuracy_columns(first.folder)
    rebuilt = fedsim.report(tmp_path / "s", target=0.5)
    assert "rounds_to_target_mean" in rebuilt.rows[0]


def test_the_table_is_a_dataframe_with_pandas_and_rows_without(tmp_path, monkeypatch):
    report = fedsim.sweep(write_sweep(tmp_path), tmp_path / "s")
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert report.table == report.rows
    monkeypatch.undo()
    pytest.importorskip("pandas", reason="tests/python.rs installs pandas")
    assert list(report.table.index) == ["fedavg", "fedprox"]


def test_a_bad_sweep_or_target_is_an_input_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "base": str(BREAST_CANCER), "grid": {"client.lr": [-1]}}))
    with pytest.raises(fedsim.InputError, match="client.lr"):
        fedsim.sweep(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(fedsim.InputError, match="target"):
        fedsim.report(tmp_path, target=90)


def test_a_sweep_given_as_a_dict_plays_as_its_file_does(tmp_path):
    file = write_sweep(tmp_path)
    from_dict = fedsim.sweep(json.loads(file.read_text()), tmp_path / "dict", jobs=2)
    from_file = fedsim.sweep(file, tmp_path / "file", jobs=2)
    assert accuracy_columns(from_dict.folder) == accuracy_columns(from_file.folder)
    with pytest.raises(fedsim.InputError, match="<dict>"):
        fedsim.sweep({"name": "no-base"}, tmp_path / "bad")


def test_a_personalised_algorithms_scores_are_in_the_metrics_and_the_report(tmp_path):
    sweep = {
        "name": "personal",
        "base": str(BREAST_CANCER),
        "variants": [
            {"name": "fedavg", "set": {"strategy": {"name": "fedavg"}}},
            {"name": "fine-tuned", "set": {"strategy": {"name": "fedavg_ft", "steps": 5}}},
        ],
        "grid": {"federation.rounds": [3], "eval.client_test_fraction": [0.25]},
    }
    report = fedsim.sweep(sweep, tmp_path / "s")
    tuned = fedsim.Run.open(next((tmp_path / "s").glob("fine-tuned*")))
    personal = tuned.records[-1]["personal_accuracy"]
    assert set(personal) == {"mean", "std", "worst_10", "best_10"}
    assert "personal_accuracy" in tuned.metrics.columns
    rows = {row["configuration"]: row for row in report.rows}
    assert float(rows["fine-tuned"]["personal_accuracy_mean_mean"]) == personal["mean"]
    assert rows["fedavg"]["personal_accuracy_mean_mean"] in ("", None)
    assert "personal-accuracy-by-round" in report.charts
