"""Runs from Python: the same bits as the command line's, errors a Python user can read, and
stops (an exception in a callback, Ctrl-C) that leave a folder resuming to the same bits."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fedsim

ROOT = Path(__file__).resolve().parents[2]
MNIST = ROOT / "experiments" / "mnist-fedavg.json"
BREAST_CANCER = ROOT / "experiments" / "breast-cancer.json"


def fedsim_binary() -> str:
    """The command line built from this checkout (the Rust test that drives pytest names it)."""
    binary = os.environ.get("FEDSIM_BIN")
    if not binary:
        pytest.fail("FEDSIM_BIN must name the fedsim binary (tests/python.rs sets it)")
    return binary


def without_wall_time(records):
    """Round records less `wall_ms`, the one field that is not a function of the config."""
    return [{k: v for k, v in r.items() if k != "wall_ms"} for r in records]


def test_a_run_equals_the_command_lines_to_the_bit(tmp_path):
    overrides = {"federation.rounds": 3}
    run = fedsim.Experiment(MNIST, overrides).run(tmp_path / "python", progress=False)
    cli = tmp_path / "cli"
    subprocess.run(
        [fedsim_binary(), "run", str(MNIST), "--set", "federation.rounds=3", "--out", str(cli),
         "--quiet"],
        check=True,
        capture_output=True,
    )
    summary = json.loads((cli / "summary.json").read_text())
    assert run.summary["final_model_sha256"] == summary["final_model_sha256"]
    assert run.summary["final_accuracy"] == summary["final_accuracy"]
    assert np.array_equal(run.model, np.fromfile(cli / "model.f32", dtype="<f4"))
    assert len(run.records) == 3
    assert run.model.dtype == np.float32
    assert run.model.size == run.summary["num_params"]


def test_a_dict_a_file_and_keyword_overrides_give_one_experiment(tmp_path):
    config = json.loads(BREAST_CANCER.read_text())
    config["federation"]["rounds"] = 4
    from_dict = fedsim.Experiment(config)
    from_file = fedsim.Experiment(BREAST_CANCER, federation__rounds=4)
    by_path = fedsim.Experiment(BREAST_CANCER, {"federation.rounds": 4})
    assert from_dict.config == from_file.config == by_path.config
    a = from_dict.run(tmp_path / "a", progress=False)
    b = from_file.run(tmp_path / "b", progress=False)
    assert a.summary["final_model_sha256"] == b.summary["final_model_sha256"]


def test_an_experiment_runs_twice_with_the_same_bits(tmp_path):
    experiment = fedsim.Experiment(BREAST_CANCER, federation__rounds=3)
    first = experiment.run(tmp_path / "first", progress=False)
    second = experiment.run(tmp_path / "second", progress=False)
    assert first.summary["final_model_sha256"] == second.summary["final_model_sha256"]


def test_a_finished_run_reads_back_as_it_was_returned(tmp_path):
    run = fedsim.Experiment(BREAST_CANCER, federation__rounds=3).run(tmp_path / "r", progress=False)
    again = fedsim.Run.open(run.folder)
    assert again.summary == run.summary
    assert again.records == run.records
    assert np.array_equal(again.model, run.model)
    parameters = run.parameters()
    assert [p["name"] for p in run.layout] == list(parameters)
    assert sum(view.size for view in parameters.values()) == run.model.size
    for param in run.layout:
        assert list(parameters[param["name"]].shape) == param["shape"]


def test_a_bad_field_is_an_input_error_naming_it():
    with pytest.raises(fedsim.InputError) as caught:
        fedsim.Experiment(BREAST_CANCER, client__lr=-1)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.file.endswith("breast-cancer.json")
    [problem] = error.problems
    assert problem["field"] == "client.lr"
    assert problem["set_by"] == "client.lr=-1"
    assert "client.lr" in str(error)


def test_an_unknown_field_in_a_dict_is_named_with_the_dict():
    config = json.loads(BREAST_CANCER.read_text())
    config["client"]["lrr"] = 0.1
    with pytest.raises(fedsim.InputError) as caught:
        fedsim.Experiment(config)
    assert caught.value.file.endswith("<dict>")
    assert [p["field"] for p in caught.value.problems] == ["client.lrr"]


def test_a_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(fedsim.InputError, match="cannot read experiment file"):
        fedsim.Experiment(tmp_path / "nowhere.json")


def test_a_used_folder_is_refused_and_left_as_it_was(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes")
    with pytest.raises(fedsim.InputError):
        fedsim.Experiment(BREAST_CANCER).run(folder, progress=False)
    assert (folder / "notes.txt").read_text() == "my notes"


def test_a_run_that_fails_raises_fedsim_error_with_the_command_lines_message(tmp_path):
    experiment = fedsim.Experiment(ROOT / "experiments" / "mnist-t1.json", client__lr=100)
    with pytest.raises(fedsim.FedsimError, match="training diverged: loss is") as caught:
        experiment.run(tmp_path / "diverged", progress=False)
    assert not isinstance(caught.value, (fedsim.InputError, fedsim.Stopped))
    assert "(try a lower client.lr)" in str(caught.value)


def test_an_exception_in_the_callback_stops_the_run_which_resumes_to_the_same_bits(tmp_path):
    experiment = fedsim.Experiment(BREAST_CANCER, federation__rounds=6)
    whole = experiment.run(tmp_path / "whole", progress=False)

    class Enough(Exception):
        pass

    def stop_at_three(record):
        if record["round"] == 3:
            raise Enough()

    folder = tmp_path / "stopped"
    with pytest.raises(Enough):
        experiment.run(folder, on_round=stop_at_three, progress=False)
    assert 3 <= sum(1 for _ in open(folder / "metrics.jsonl")) < 6
    seen = []
    resumed = fedsim.resume(folder, on_round=lambda r: seen.append(r["round"]), progress=False)
    assert seen and seen[-1] == 6
    assert resumed.summary["final_model_sha256"] == whole.summary["final_model_sha256"]
    assert without_wall_time(resumed.records) == without_wall_time(whole.records)


def test_ctrl_c_stops_at_a_round_boundary_and_the_folder_resumes_to_the_same_bits(tmp_path):
    # Rounds of a millisecond or so: enough of them that the interrupt, seen within a few
    # milliseconds, stops the run long before its end.
    rounds = 400
    experiment = fedsim.Experiment(BREAST_CANCER, federation__rounds=rounds)
    whole = experiment.run(tmp_path / "whole", progress=False)

    def interrupt_at_two(record):
        if record["round"] == 2:
            os.kill(os.getpid(), signal.SIGINT)

    folder = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        experiment.run(folder, on_round=interrupt_at_two, progress=False)
    done = sum(1 for _ in open(folder / "metrics.jsonl"))
    assert 2 <= done < rounds, done
    assert (folder / "checkpoint.fedsim").exists()
    resumed = fedsim.resume(folder, progress=False)
    assert resumed.summary["final_model_sha256"] == whole.summary["final_model_sha256"]
    assert without_wall_time(resumed.records) == without_wall_time(whole.records)


def test_resuming_a_finished_run_reads_it(tmp_path):
    run = fedsim.Experiment(BREAST_CANCER, federation__rounds=2).run(tmp_path / "r", progress=False)
    again = fedsim.resume(run.folder, progress=False)
    assert again.summary == run.summary


def test_training_releases_the_interpreter(tmp_path):
    ticks = []
    done = threading.Event()

    def tick():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    experiment = fedsim.Experiment(MNIST, federation__rounds=2)
    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        started = time.monotonic()
        experiment.run(tmp_path / "r", progress=False)
        ended = time.monotonic()
    finally:
        done.set()
        ticker.join()
    during = [t for t in ticks if started < t < ended]
    # Holding the lock for the whole run would leave the other thread no tick in between.
    assert len(during) > 10, (len(during), ended - started)


def test_the_metrics_are_a_dataframe_with_pandas(tmp_path):
    pytest.importorskip("pandas", reason="tests/python.rs installs pandas")
    experiment = fedsim.Experiment(BREAST_CANCER, federation__rounds=2, eval__every=1)
    run = experiment.run(tmp_path / "r", progress=False)
    assert list(run.metrics.index) == [1, 2]
    assert list(run.metrics["test_accuracy"]) == [r["test_accuracy"] for r in run.records]


def test_the_metrics_are_the_records_without_pandas(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    run = fedsim.Experiment(BREAST_CANCER, federation__rounds=2).run(tmp_path / "r", progress=False)
    assert run.metrics == run.records


def test_progress_is_a_bar_with_tqdm(tmp_path, capsys):
    pytest.importorskip("tqdm", reason="tests/python.rs installs tqdm")
    fedsim.Experiment(BREAST_CANCER, federation__rounds=3).run(tmp_path / "r")
    bar = capsys.readouterr().err
    assert "training" in bar and "3/3" in bar and "test acc" in bar, bar


def test_progress_is_a_line_per_evaluated_round_without_tqdm(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    fedsim.Experiment(BREAST_CANCER, federation__rounds=3, eval__every=1).run(tmp_path / "r")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"], lines


def test_a_live_chart_collects_each_evaluated_round_and_draws_itself(tmp_path):
    chart = fedsim.LiveChart(target=0.9)
    experiment = fedsim.Experiment(BREAST_CANCER, federation__rounds=3, eval__every=1)
    run = experiment.run(tmp_path / "r", on_round=chart, progress=False)
    assert [round for round, _ in chart.points] == [1, 2, 3]
    assert [accuracy for _, accuracy in chart.points] == [r["test_accuracy"] for r in run.records]
    svg = chart._repr_svg_()
    assert svg.startswith("<svg") and "target 90%" in svg and "test accuracy" in svg
