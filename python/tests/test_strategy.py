"""Strategies written in Python: registered by name, bit for bit with the built-ins where the
algebra says so, through checkpoints and resume, in sweeps and reports, and under the
conformance kit; their errors name the class and end the run with its traceback."""

import json

import numpy as np
import pytest

import fedsim
from test_run import BREAST_CANCER


@fedsim.register_strategy("numpy-fedavg")
class NumpyFedAvg(fedsim.Strategy):
    """FedAvg as fedsim sums it: n_k / n in float32, added in client order from zeros."""

    paper = "McMahan et al. 2017, in NumPy"

    def aggregate(self, round, global_model, updates, rng):
        total = np.zeros_like(global_model)
        for weight, model in zip(updates.sample_weights(), updates.models):
            total += weight * model
        return total


@fedsim.register_strategy("numpy-median")
class NumpyMedian(fedsim.Strategy):
    """The coordinate-wise median; an even count's two middle values averaged in float32."""

    def aggregate(self, round, global_model, updates, rng):
        ordered = np.sort(updates.models, axis=0)
        n = len(updates)
        if n % 2:
            return ordered[n // 2]
        return (ordered[n // 2 - 1] + ordered[n // 2]) / np.float32(2)


@fedsim.register_strategy("momentum-with-draws")
class ServerMomentum(fedsim.Strategy):
    """FedAvg with server momentum kept between rounds (FedAvgM's shape), and a random draw
    per round reported as a metric, so that state and generator both go through a resume."""

    params = {"beta": 0.9}

    def __init__(self, setting, **params):
        super().__init__(setting, **params)
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must be in [0, 1), not {self.beta}")
        self.velocity = None

    def aggregate(self, round, global_model, updates, rng):
        mean = np.average(updates.models, axis=0, weights=updates.samples).astype(np.float32)
        step = global_model - mean
        if self.velocity is None:
            self.velocity = np.zeros_like(global_model)
        self.velocity = np.float32(self.beta) * self.velocity + step
        return global_model - self.velocity, {"draw": float(rng.random())}

    def state(self):
        return {} if self.velocity is None else {"velocity": self.velocity}

    def restore(self, state):
        self.velocity = state.get("velocity")


def run(tmp_path, name, strategy, **fields):
    experiment = fedsim.Experiment(BREAST_CANCER, strategy=strategy, **fields)
    return experiment.run(tmp_path / name, progress=False)


def test_fedavg_in_numpy_gives_the_built_ins_model_to_the_bit(tmp_path):
    numpy = run(tmp_path, "numpy", {"name": "numpy-fedavg"}, federation__rounds=4)
    built_in = run(tmp_path, "rust", {"name": "fedavg"}, federation__rounds=4)
    assert numpy.summary["final_model_sha256"] == built_in.summary["final_model_sha256"]
    assert numpy.summary["final_accuracy"] == built_in.summary["final_accuracy"]


def test_the_median_in_numpy_gives_the_built_ins_model_to_the_bit(tmp_path):
    numpy = run(tmp_path, "numpy", {"name": "numpy-median"}, federation__rounds=3)
    built_in = run(tmp_path, "rust", {"name": "median"}, federation__rounds=3)
    assert numpy.summary["final_model_sha256"] == built_in.summary["final_model_sha256"]


def test_state_and_the_generator_go_through_a_resume_to_the_same_bits(tmp_path):
    strategy = {"name": "momentum-with-draws", "beta": 0.5}
    whole = run(tmp_path, "whole", strategy, federation__rounds=4)
    draws = [r["strategy"]["draw"] for r in whole.records]
    assert len(set(draws)) == 4, "each round's generator is its own"

    def stop_after_two(record):
        if record["round"] == 2:
            raise KeyboardInterrupt

    experiment = fedsim.Experiment(BREAST_CANCER, strategy=strategy, federation__rounds=4)
    with pytest.raises(KeyboardInterrupt):
        experiment.run(tmp_path / "stopped", on_round=stop_after_two, progress=False)
    resumed = fedsim.resume(tmp_path / "stopped", progress=False)
    assert resumed.summary["final_model_sha256"] == whole.summary["final_model_sha256"]
    assert [r["strategy"]["draw"] for r in resumed.records] == draws


def test_a_python_strategy_runs_in_a_sweep_beside_fedavg_and_the_report_compares_them(tmp_path):
    sweep = {
        "name": "numpy-vs-rust",
        "base": str(BREAST_CANCER),
        "variants": [
            {"name": "fedavg", "set": {"strategy": {"name": "fedavg"}}},
            {"name": "momentum", "set": {"strategy": {"name": "momentum-with-draws"}}},
        ],
        "grid": {"federation.rounds": [3]},
    }
    file = tmp_path / "sweep.json"
    file.write_text(json.dumps(sweep))
    report = fedsim.sweep(file, tmp_path / "sweep", jobs=2)
    assert len(report.rows) == 2
    assert all(row["seeds"] == 1 for row in report.rows)


def test_the_conformance_kit_passes_a_python_strategy(tmp_path):
    passed = fedsim.conformance("momentum-with-draws", tmp_path, beta=0.5)
    for check in ["runs flat", "relay equals flat", "one worker equals two",
                  "aggregating schedulers refused", "a stopped run resumes to the same bits"]:
        assert check in passed


def test_an_unknown_parameter_and_a_refused_one_name_the_field():
    with pytest.raises(fedsim.InputError) as unknown:
        fedsim.Experiment(BREAST_CANCER, strategy={"name": "momentum-with-draws", "gamma": 1})
    assert [p["field"] for p in unknown.value.problems] == ["strategy.gamma"]
    assert "it takes beta" in unknown.value.problems[0]["message"]
    with pytest.raises(fedsim.InputError) as refused:
        fedsim.Experiment(BREAST_CANCER, strategy={"name": "momentum-with-draws", "beta": 2})
    assert "beta must be in [0, 1), not 2" in str(refused.value)


def test_an_exception_in_aggregate_ends_the_run_with_its_traceback_and_a_resumable_folder(
    tmp_path,
):
    @fedsim.register_strategy("fails-in-round-3")
    class FailsInRoundThree(fedsim.Strategy):
        def aggregate(self, round, global_model, updates, rng):
            if round.number == 3:
                raise ArithmeticError("no third round here")
            return updates.models[0]

    with pytest.raises(fedsim.FedsimError) as error:
        run(tmp_path, "failing", {"name": "fails-in-round-3"}, federation__rounds=4)
    message = str(error.value)
    assert 'the Python strategy "fails-in-round-3" raised in aggregate in round 3' in message
    assert "ArithmeticError: no third round here" in message
    assert "Traceback" in message
    assert "the server ended the run" in message and "panicked" not in message
    finished = (tmp_path / "failing" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in finished] == [1, 2]

    @fedsim.register_strategy("fails-in-round-3")
    class Mended(fedsim.Strategy):
        def aggregate(self, round, global_model, updates, rng):
            return updates.models[0]

    resumed = fedsim.resume(tmp_path / "failing", progress=False)
    assert [r["round"] for r in resumed.records] == [1, 2, 3, 4]


def test_a_wrong_answer_is_named(tmp_path):
    @fedsim.register_strategy("returns-float64")
    class ReturnsFloat64(fedsim.Strategy):
        def aggregate(self, round, global_model, updates, rng):
            return updates.models.astype(np.float64).mean(axis=0)

    with pytest.raises(fedsim.FedsimError, match="must return float32 values"):
        run(tmp_path, "float64", {"name": "returns-float64"})


def test_registration_refuses_a_built_ins_name_and_lists_the_class():
    with pytest.raises(ValueError, match="fedavg"):
        fedsim.register_strategy("fedavg", NumpyFedAvg)
    with pytest.raises(TypeError):
        fedsim.register_strategy("not-a-class", object)
    listed = fedsim.strategies()
    names = list(listed.index) if hasattr(listed, "index") else [r["name"] for r in listed]
    assert "numpy-fedavg" in names and names.index("numpy-fedavg") > names.index("fedavg")


@fedsim.register_strategy("clients-in-turn")
class ClientsInTurn(fedsim.Strategy):
    """Chooses the online clients in turn, from where the last round's choice ended, and
    averages as FedAvg does; aggregate moves the turn on, so the two methods share the
    instance, and the turn goes through checkpoints."""

    def __init__(self, setting, **params):
        super().__init__(setting, **params)
        self.turn = 0

    def select(self, candidates, rng):
        start = self.turn % len(candidates.online)
        return np.roll(candidates.online, -start)[: candidates.wanted]

    def aggregate(self, round, global_model, updates, rng):
        self.turn += len(updates)
        total = np.zeros_like(global_model)
        for weight, model in zip(updates.sample_weights(), updates.models):
            total += weight * model
        return total

    def state(self):
        return {"turn": np.array([self.turn], dtype=np.float32)}

    def restore(self, state):
        self.turn = int(state["turn"][0])


def test_a_strategys_select_chooses_who_trains_sharing_the_instance_that_aggregates(tmp_path):
    whole = run(tmp_path, "whole", {"name": "clients-in-turn"}, federation__rounds=4)
    # 10 clients, 5 a round, all online and answering: 0-4, 5-9, 0-4, 5-9.
    chosen = [sorted(r["clients"]) for r in whole.records]
    assert chosen == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]] * 2

    def stop_after_one(record):
        if record["round"] == 1:
            raise KeyboardInterrupt

    experiment = fedsim.Experiment(
        BREAST_CANCER, strategy={"name": "clients-in-turn"}, federation__rounds=4
    )
    with pytest.raises(KeyboardInterrupt):
        experiment.run(tmp_path / "stopped", on_round=stop_after_one, progress=False)
    resumed = fedsim.resume(tmp_path / "stopped", progress=False)
    assert [sorted(r["clients"]) for r in resumed.records] == chosen
    assert resumed.summary["final_model_sha256"] == whole.summary["final_model_sha256"]


def test_a_choice_that_is_not_wanted_distinct_online_clients_is_named(tmp_path):
    @fedsim.register_strategy("chooses-twice")
    class ChoosesTwice(fedsim.Strategy):
        def select(self, candidates, rng):
            return [candidates.online[0]] * candidates.wanted

        def aggregate(self, round, global_model, updates, rng):
            return updates.models[0]

    with pytest.raises(fedsim.FedsimError, match="select\\(\\) must return 5 distinct ids"):
        run(tmp_path, "twice", {"name": "chooses-twice"}, federation__rounds=2)


def test_a_global_model_that_diverged_is_named_as_the_cause_not_the_clients_rate(tmp_path):
    @fedsim.register_strategy("returns-nan")
    class ReturnsNan(fedsim.Strategy):
        def aggregate(self, round, global_model, updates, rng):
            return np.full_like(global_model, np.nan)

    with pytest.raises(fedsim.FedsimError) as error:
        run(tmp_path, "nan", {"name": "returns-nan"}, federation__rounds=3)
    message = str(error.value)
    assert "in round 2" in message and "epoch 1, step 1" in message, message
    assert "the model it was sent gives this loss before any local step" in message, message
