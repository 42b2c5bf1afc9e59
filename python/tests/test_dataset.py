"""Data sets registered from Python: the checks and the bits of the same arrays read from a
file, NaN refused, shapes named, and natural clients for the natural partition."""

import numpy as np
import pytest

import fedsim


def blobs(seed=0, train=600, test=200, features=8):
    """Two Gaussian classes, a little apart."""
    rng = np.random.default_rng(seed)

    def split(n):
        y = rng.integers(0, 2, n)
        x = rng.normal(size=(n, features)).astype(np.float32) + y[:, None] * 0.8
        return x, y

    return (*split(train), *split(test))


def experiment(data, **fields):
    config = {
        "name": "blobs",
        "seed": 3,
        "data": data,
        "partition": {"scheme": "iid"},
        "model": "logistic",
        "federation": {"num_clients": 10, "clients_per_round": 5, "rounds": 3},
        "client": {"epochs": 1, "batch_size": 16, "lr": 0.1},
    }
    return fedsim.Experiment(config, **fields)


def test_registered_arrays_give_the_bits_of_the_same_arrays_read_from_a_file(tmp_path):
    x_train, y_train, x_test, y_test = blobs()
    fedsim.register_dataset("blobs", x_train, y_train, x_test, y_test)
    np.savez(tmp_path / "blobs.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    registered = experiment({"dataset": "blobs"}).run(tmp_path / "registered", progress=False)
    from_file = experiment({"dataset": "numpy", "path": str(tmp_path / "blobs.npz")}).run(
        tmp_path / "file", progress=False
    )
    assert registered.summary["final_model_sha256"] == from_file.summary["final_model_sha256"]
    assert registered.summary["final_accuracy"] > 0.6
    listed = fedsim.datasets()
    names = list(listed.index) if hasattr(listed, "index") else [r["name"] for r in listed]
    assert "blobs" in names


def test_a_nan_feature_is_refused_when_an_experiment_loads_it():
    x_train, y_train, x_test, y_test = blobs()
    x_train[3, 2] = np.nan
    fedsim.register_dataset("blobs-with-nan", x_train, y_train, x_test, y_test)
    with pytest.raises(fedsim.InputError, match="holds NaN in training sample 3, feature 2"):
        experiment({"dataset": "blobs-with-nan"})


def test_a_shape_fedsim_cannot_read_is_named_at_registration():
    x_train, y_train, x_test, y_test = blobs()
    with pytest.raises(fedsim.InputError, match="python:short-labels/y_train"):
        fedsim.register_dataset("short-labels", x_train, y_train[:-1], x_test, y_test)
    with pytest.raises(ValueError, match="registered already"):
        fedsim.register_dataset("mnist", x_train, y_train, x_test, y_test)


def test_clients_of_the_arrays_make_the_natural_partition(tmp_path):
    x_train, y_train, x_test, y_test = blobs()
    clients = np.arange(len(x_train)) % 4
    test_clients = np.arange(len(x_test)) % 4
    fedsim.register_dataset(
        "blobs-by-site", x_train, y_train, x_test, y_test, clients=clients, test_clients=test_clients
    )
    natural = {"partition": {"scheme": "natural"}, "federation.num_clients": 4,
               "federation.clients_per_round": 4}
    run = experiment({"dataset": "blobs-by-site"}, overrides=natural).run(
        tmp_path / "natural", progress=False
    )
    stats = fedsim.Experiment(run.folder / "config.json").partition_stats
    assert [sum(counts) for counts in stats["label_counts"]] == [150, 150, 150, 150]
    with pytest.raises(fedsim.InputError, match="the data set defines 4 clients"):
        experiment({"dataset": "blobs-by-site"}, overrides={**natural, "federation.num_clients": 5})
    with pytest.raises(ValueError, match="no training sample of client 1"):
        fedsim.register_dataset(
            "gap", x_train, y_train, x_test, y_test,
            clients=np.where(clients == 1, 2, clients), test_clients=test_clients,
        )
