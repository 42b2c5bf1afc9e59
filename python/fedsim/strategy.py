"""Strategies written in Python: the server half of an FL algorithm as a class.

Subclass :class:`Strategy`, write its :meth:`~Strategy.aggregate` in NumPy, and register it
by name; experiments, sweeps and the conformance kit then name it as they name ``fedavg``::

    import numpy as np
    import fedsim

    @fedsim.register_strategy("plain-mean")
    class PlainMean(fedsim.Strategy):
        \"\"\"Every client counts the same, whatever its number of samples.\"\"\"

        def aggregate(self, round, global_model, updates, rng):
            return updates.models.mean(axis=0, dtype=np.float32)

    fedsim.Experiment("experiments/mnist-fedavg.json", strategy={"name": "plain-mean"}).run()

fedsim calls the class on the server thread, once a round, with the round's updates sorted by
client id and a NumPy generator seeded from the experiment seed and the round, so a rerun
gives the same bits. Its clients train as FedAvg's do, in Rust: a strategy decides what the
server does with what they send, not how they train.
"""

from __future__ import annotations

import inspect
import os
import json
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

import numpy as np

from . import _fedsim

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Setting:
    """The parts of the experiment a strategy may depend on."""

    seed: int
    """The experiment seed."""
    lr: float
    """The clients' learning rate (``client.lr``)."""
    momentum: float
    """The clients' momentum (``client.momentum``; 0 for none)."""
    num_clients: int
    """Clients in the federation."""
    clients_per_round: Optional[int]
    """Clients trained each round; ``None`` for all of them."""


@dataclass(frozen=True)
class Round:
    """What the server knows of the round besides the updates."""

    number: int
    """The round, from 1."""
    sampled: np.ndarray
    """The clients sampled to train this round, in id order (those whose update is missing,
    dropped or late, included)."""
    num_clients: int
    """Clients in the federation."""


@dataclass(frozen=True)
class Updates:
    """A round's updates, one row per client that answered, sorted by client id."""

    clients: np.ndarray
    """The clients' ids (int64)."""
    samples: np.ndarray
    """Each client's training samples (int64): FedAvg's weights."""
    models: np.ndarray
    """The trained models, one flat float32 row each, laid out as the global model."""
    losses: np.ndarray
    """Each client's mean training loss (float64)."""

    def __len__(self) -> int:
        return len(self.clients)

    def sample_weights(self) -> np.ndarray:
        """Each update's share of the round's samples, ``n_k / n``, as fedsim's built-ins
        weigh it: the ratio in float64, rounded to float32. Summing ``weight * model`` in
        float32, in this order, from zeros, gives FedAvg's model to the bit."""
        return (self.samples / self.samples.sum()).astype(np.float32)


@dataclass(frozen=True)
class Candidates:
    """The clients a round may choose from, in id order, with what the server has seen of each
    (NaN where it has seen nothing: a client it never took an update from)."""

    round: int
    """The round, from 1."""
    online: np.ndarray
    """The ids of the clients online now (int64): choose among them."""
    samples: np.ndarray
    """Each one's training samples (int64)."""
    wanted: int
    """How many clients to choose."""
    now_s: float
    """Simulated seconds since the run started."""
    last_round: np.ndarray
    """The last round whose update the server took from each (float64; NaN: never)."""
    last_loss: np.ndarray
    """The training loss each reported then (float64)."""
    last_train_s: np.ndarray
    """Simulated seconds its local work then took (float64)."""
    last_upload_s: np.ndarray
    """Simulated seconds its update then took to reach the server (float64)."""


class Strategy:
    """The server half of an FL algorithm, written in Python.

    A subclass declares its parameters, with their defaults, in :attr:`params`; an
    experiment's ``strategy`` section sets them beside the name
    (``{"name": "my-rule", "beta": 0.5}``), and each is an attribute of the instance. One
    instance serves one run, made as the run starts (and again when it resumes, which then
    hands it :meth:`restore` what :meth:`state` saved).
    """

    params: ClassVar[Mapping[str, Any]] = {}
    """Each parameter's name and default."""

    paper: ClassVar[str] = ""
    """The paper the rule follows, as the catalogue cites it."""

    def __init__(self, setting: Setting, **params: Any) -> None:
        self.setting = setting
        """The experiment's setting."""
        for name, value in params.items():
            setattr(self, name, value)

    def downlink(self) -> Dict[str, np.ndarray]:
        """Float32 arrays sent to every client with the global model (none by default; the
        clients' built-in training reads none, so these count as traffic only)."""
        return {}

    def aggregate(
        self,
        round: Round,
        global_model: np.ndarray,
        updates: Updates,
        rng: np.random.Generator,
    ) -> Union[np.ndarray, Tuple[np.ndarray, Mapping[str, float]]]:
        """The next global model (a flat float32 array shaped as ``global_model``) from the
        current one and the round's updates; with a dict of named numbers for the round's
        record, as a pair, if it has any. Draw any randomness from ``rng``."""
        raise NotImplementedError(f"{type(self).__name__} must define aggregate()")

    def select(self, candidates: "Candidates", rng: np.random.Generator) -> Sequence[int]:
        """The clients to train this round: ``candidates.wanted`` distinct ids among
        ``candidates.online``, in any order, drawn from ``rng`` where the choice is random. It
        is called on the instance that aggregates, before the round starts. A class that does
        not define it leaves the choice to fedsim: every online client equally likely."""
        raise NotImplementedError("fedsim chooses uniformly when select() is not defined")

    def state(self) -> Dict[str, np.ndarray]:
        """What the rule remembers between rounds, as named float32 arrays, for checkpoints
        (nothing by default)."""
        return {}

    def restore(self, state: Dict[str, np.ndarray]) -> None:
        """Takes back what :meth:`state` gave, when a run resumes."""
        if state:
            raise ValueError(
                f"{type(self).__name__} keeps no state, but the checkpoint holds {sorted(state)}:"
                " define restore()"
            )


StrategyClass = Type[Strategy]


def register_strategy(
    name: str, cls: Optional[StrategyClass] = None
) -> Union[StrategyClass, Callable[[StrategyClass], StrategyClass]]:
    """Registers the :class:`Strategy` subclass ``cls`` under ``name``, beside the built-ins;
    without ``cls``, a class decorator that does. Registering a name again replaces the class
    (a notebook cell run twice); a built-in's name is refused.

    Raises:
        TypeError: ``cls`` is not a subclass of :class:`Strategy`.
        ValueError: the name is a built-in's, or not lowercase letters, digits, ``_`` and
            ``-`` from a letter.
    """

    def register(cls: StrategyClass) -> StrategyClass:
        if not (inspect.isclass(cls) and issubclass(cls, Strategy)):
            raise TypeError(f"register_strategy takes a subclass of fedsim.Strategy, not {cls!r}")
        origin = f"{cls.__module__}.{cls.__qualname__} (Python)"
        _fedsim.register_strategy(name, cls.paper or "written in Python", origin, _Adapter(cls))
        return cls

    return register if cls is None else register(cls)


class _Adapter:
    """What the engine calls: checks a class's parameters and makes its instances."""

    def __init__(self, cls: StrategyClass) -> None:
        self.cls = cls

    def check(self, params_json: str, setting_json: str) -> List[Tuple[str, str]]:
        """Each parameter the class does not declare, then the exception its constructor
        raises, as ``(field, message)`` pairs."""
        params = json.loads(params_json)
        declared = dict(self.cls.params)
        unknown = [name for name in params if name not in declared]
        if unknown:
            takes = ", ".join(declared) or "no parameters"
            return [
                (name, f"is not a parameter of {self.cls.__name__} (it takes {takes})")
                for name in unknown
            ]
        try:
            self.make(params_json, setting_json)
        except Exception as error:  # what the class refuses, as the file's error
            return [("", f"{self.cls.__name__}({_arguments(params)}) raised {error!r}")]
        return []

    def make(self, params_json: str, setting_json: str) -> "_Instance":
        """An instance for one run."""
        params = {**self.cls.params, **json.loads(params_json)}
        setting = Setting(**json.loads(setting_json))
        return _Instance(self.cls(setting, **params))


def _arguments(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in params.items())


def _float32_arrays(arrays: Any, what: str) -> List[Tuple[str, np.ndarray]]:
    """``arrays`` (a mapping of names to arrays) as flat contiguous float32 arrays."""
    if not isinstance(arrays, Mapping):
        raise TypeError(f"{what} must return a dict of arrays, not {type(arrays).__name__}")
    return [
        (str(name), np.ascontiguousarray(np.asarray(array, dtype=np.float32).ravel()))
        for name, array in arrays.items()
    ]


class _Instance:
    """One run's instance of a strategy class, its answers checked and converted."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def downlink(self) -> List[Tuple[str, np.ndarray]]:
        return _float32_arrays(self.strategy.downlink(), "downlink()")

    def aggregate(
        self,
        *,
        number: int,
        sampled: np.ndarray,
        num_clients: int,
        global_model: np.ndarray,
        clients: np.ndarray,
        samples: np.ndarray,
        models: np.ndarray,
        losses: np.ndarray,
        rng_seed: int,
    ) -> Tuple[np.ndarray, List[Tuple[str, float]]]:
        for array in (sampled, global_model, clients, samples, models, losses):
            array.flags.writeable = False
        round = Round(number=number, sampled=sampled.astype(np.int64), num_clients=num_clients)
        updates = Updates(
            clients=clients.astype(np.int64),
            samples=samples.astype(np.int64),
            models=models,
            losses=losses,
        )
        rng = np.random.Generator(np.random.PCG64(rng_seed))
        answer = self.strategy.aggregate(round, global_model, updates, rng)
        metrics: Mapping[str, float] = {}
        if isinstance(answer, tuple):
            answer, metrics = answer
        model = np.asarray(answer)
        if model.shape != global_model.shape:
            raise ValueError(
                f"aggregate() must return a model shaped as the global model, {global_model.shape},"
                f" not {model.shape}"
            )
        if model.dtype != np.float32:
            raise TypeError(
                f"aggregate() must return float32 values, as fedsim's models are, not {model.dtype}"
                " (convert with .astype(np.float32) where the rounding is yours to choose)"
            )
        return np.ascontiguousarray(model), [(str(k), float(v)) for k, v in metrics.items()]

    @property
    def selects(self) -> bool:
        """Whether the class chooses who trains."""
        return type(self.strategy).select is not Strategy.select

    def select(
        self,
        *,
        number: int,
        online: np.ndarray,
        samples: np.ndarray,
        wanted: int,
        now_s: float,
        last_round: np.ndarray,
        last_loss: np.ndarray,
        last_train_s: np.ndarray,
        last_upload_s: np.ndarray,
        rng_seed: int,
    ) -> List[int]:
        for array in (online, samples, last_round, last_loss, last_train_s, last_upload_s):
            array.flags.writeable = False
        candidates = Candidates(
            round=number,
            online=online.astype(np.int64),
            samples=samples.astype(np.int64),
            wanted=wanted,
            now_s=now_s,
            last_round=last_round,
            last_loss=last_loss,
            last_train_s=last_train_s,
            last_upload_s=last_upload_s,
        )
        rng = np.random.Generator(np.random.PCG64(rng_seed))
        chosen = [int(c) for c in np.asarray(self.strategy.select(candidates, rng)).ravel()]
        allowed = set(candidates.online.tolist())
        if len(chosen) != wanted or len(set(chosen)) != wanted or not set(chosen) <= allowed:
            raise ValueError(
                f"select() must return {wanted} distinct ids of candidates.online, not {chosen}"
            )
        return chosen

    def state(self) -> List[Tuple[str, np.ndarray]]:
        return _float32_arrays(self.strategy.state(), "state()")

    def restore(self, state: List[Tuple[str, np.ndarray]]) -> Optional[str]:
        self.strategy.restore({name: array.copy() for name, array in state})
        return None


def conformance(name: str, scratch: Union[str, "os.PathLike[str]"], **params: Any) -> List[str]:
    """Runs the conformance kit on the algorithm registered as ``name`` (a Python strategy or
    a built-in) with the parameters ``params``, its runs in folders under ``scratch``: the
    promises every fedsim algorithm keeps (flat and relayed runs agree, one worker and two
    agree, a stopped run resumes to the same bits, aggregating schedulers run it or refuse it
    with the reason, a failing client ends the run). Returns the checks that held.

    Raises:
        FedsimError: a promise is broken; the message names each one and what happened.
    """
    return list(_fedsim.conformance(name, json.dumps(params), os.fspath(scratch)))
