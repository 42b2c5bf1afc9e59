"""Experiments and their runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

import numpy as np

from . import _fedsim
from .errors import Stopped

PathLike = Union[str, "os.PathLike[str]"]
RoundCallback = Callable[[Dict[str, Any]], None]


def _overrides(overrides: Optional[Mapping[str, Any]], fields: Mapping[str, Any]) -> List[str]:
    """``--set``'s ``path.to.field=value`` strings for dotted paths and ``a__b`` keywords."""
    given = dict(overrides or {})
    given.update({name.replace("__", "."): value for name, value in fields.items()})
    return [f"{path}={json.dumps(value)}" for path, value in given.items()]


class Experiment:
    """An experiment, checked, with its data loaded and split among its clients.

    ``source`` is an experiment file (as ``fedsim run`` takes) or a dict of the same fields.
    Fields are overridden as ``--set`` overrides them: by dotted path in ``overrides``
    (``{"federation.rounds": 5}``) or by keyword with ``__`` for the dots
    (``federation__rounds=5``); an override wins over the file, a keyword over ``overrides``.
    A relative path in a dict (a data file, a trace) starts from the current folder.

    Raises:
        InputError: the experiment, an override or a data file is at fault; ``problems``
            names each field and what it expects.
    """

    def __init__(
        self,
        source: Union[PathLike, Mapping[str, Any]],
        overrides: Optional[Mapping[str, Any]] = None,
        **fields: Any,
    ) -> None:
        assignments = _overrides(overrides, fields)
        if isinstance(source, Mapping):
            text = json.dumps(source, allow_nan=False)
            label = os.path.join(os.getcwd(), "<dict>")
            self._engine = _fedsim.from_json(text, label, assignments)
        else:
            self._engine = _fedsim.load(os.fspath(source), assignments)
        self.config: Dict[str, Any] = json.loads(self._engine.config_json())
        """The resolved experiment, every default filled in, as the run folder's
        ``config.json`` holds it."""

    @property
    def name(self) -> str:
        """The experiment's name, which names its default run folder."""
        return self.config["name"]

    @property
    def partition_stats(self) -> Dict[str, Any]:
        """Per-client label counts and their spread, as ``partition_stats.json`` holds them (the
        spread of the sample counts alone where clients are made on demand)."""
        return json.loads(self._engine.partition_stats_json())

    @property
    def layout(self) -> List[Dict[str, Any]]:
        """The model's parameters in the order their values lie in the flat model: each one's
        ``name``, ``shape`` and ``kind``."""
        return json.loads(self._engine.layout_json())["params"]

    def run(
        self,
        out: Optional[PathLike] = None,
        on_round: Optional[RoundCallback] = None,
        progress: bool = True,
    ) -> "Run":
        """Plays the experiment in a new run folder and returns the finished run.

        Args:
            out: the run folder, new or empty (default ``runs/NAME-TIMESTAMP``, as
                ``fedsim run``'s).
            on_round: called with each finished round's record (a dict, one line of
                ``metrics.jsonl``), on the thread that runs the rounds; an exception it
                raises stops the run at that round and is raised again here.
            progress: show a progress bar (tqdm's, where installed; else a line per
                evaluated round).

        Raises:
            KeyboardInterrupt: Ctrl-C; the run stopped at a round boundary and
                :func:`resume` continues it from its folder.
            InputError: the folder holds a run already, or is not fedsim's to write.
            FedsimError: the run failed (a client failed under the abort policy, say).
        """
        folder = Path(out) if out is not None else Path(_fedsim.default_folder(self.name))
        follow = _Follower(self.config["federation"]["rounds"], 0, on_round, progress)
        try:
            outcome = self._engine.run(os.fspath(folder), follow)
        except (KeyboardInterrupt, Stopped) as stop:
            _note_resumable(stop, folder)
            raise
        finally:
            follow.close()
        return Run._from_outcome(outcome, self.layout)

    def __repr__(self) -> str:
        federation = self.config["federation"]
        return (
            f"Experiment({self.name!r}: {self.config['model']['name']}, "
            f"{federation['num_clients']} clients, {federation['rounds']} rounds)"
        )


class Run:
    """A finished run: what its folder holds, read into Python.

    Attributes:
        folder: the run folder.
        summary: ``summary.json``: final and best accuracy, traffic, simulated time, the final
            model's SHA-256.
        records: ``metrics.jsonl``, one dict per round.
        model: the final model's flat parameters (``model.f32``), a float32 array.
        layout: where each parameter lies in ``model``: its ``name``, ``shape`` and ``kind``.
    """

    def __init__(
        self,
        folder: Path,
        summary: Dict[str, Any],
        records: List[Dict[str, Any]],
        model: np.ndarray,
        layout: List[Dict[str, Any]],
    ) -> None:
        self.folder = folder
        self.summary = summary
        self.records = records
        self.model = model
        self.layout = layout

    @classmethod
    def open(cls, folder: PathLike) -> "Run":
        """Reads the finished run in ``folder``."""
        folder = Path(folder)
        summary = json.loads((folder / "summary.json").read_text())
        with open(folder / "metrics.jsonl") as lines:
            records = [json.loads(line) for line in lines if line.strip()]
        model = np.fromfile(folder / "model.f32", dtype="<f4")
        layout = json.loads((folder / "model-layout.json").read_text())["params"]
        return cls(folder, summary, records, model, layout)

    @classmethod
    def _from_outcome(cls, outcome: Dict[str, Any], layout: List[Dict[str, Any]]) -> "Run":
        return cls(
            Path(outcome["folder"]),
            json.loads(outcome["summary"]),
            json.loads(outcome["rounds"]),
            outcome["model"],
            layout,
        )

    @property
    def metrics(self) -> Any:
        """The round records as a pandas DataFrame indexed by round, where pandas is
        installed; else the list of dicts itself."""
        try:
            import pandas
        except ImportError:
            return self.records
        return pandas.DataFrame.from_records(self.records).set_index("round")

    def parameters(self) -> Dict[str, np.ndarray]:
        """The final model's parameters by name, each a view of ``model`` in its shape."""
        views, start = {}, 0
        for param in self.layout:
            size = int(np.prod(param["shape"], dtype=np.int64))
            views[param["name"]] = self.model[start : start + size].reshape(param["shape"])
            start += size
        return views

    def __repr__(self) -> str:
        return (
            f"Run({str(self.folder)!r}: {self.summary['rounds']} rounds, "
            f"final accuracy {100 * self.summary['final_accuracy']:.2f}%)"
        )


def resume(
    folder: PathLike, on_round: Optional[RoundCallback] = None, progress: bool = True
) -> Run:
    """Continues the run in ``folder`` (as ``fedsim run --resume``) to its last round and
    returns it; a run that had finished is read as it is.

    Raises:
        InputError: the folder holds no run fedsim can continue, or its data files changed.
    """
    folder = Path(folder)
    run = _fedsim.resumable(os.fspath(folder))
    follow = _Follower(run.rounds, run.rounds_done, on_round, progress)
    try:
        outcome = run.play(follow)
    except (KeyboardInterrupt, Stopped) as stop:
        _note_resumable(stop, folder)
        raise
    finally:
        follow.close()
    if outcome is None:
        return Run.open(folder)
    layout = json.loads((folder / "model-layout.json").read_text())["params"]
    return Run._from_outcome(outcome, layout)


def _note_resumable(error: BaseException, folder: Path) -> None:
    """Says on the exception (Python 3.11's notes) how to continue the stopped run."""
    if hasattr(error, "add_note"):
        error.add_note(f"the run folder {folder} resumes it: fedsim.resume({str(folder)!r})")


class _Follower:
    """What the engine calls with each finished round: the progress bar, then the user's
    callback with the record as a dict."""

    def __init__(
        self, rounds: int, done: int, on_round: Optional[RoundCallback], progress: bool
    ) -> None:
        self.on_round = on_round
        self.bar = None
        self.lines = False
        if progress:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self.lines = True
            else:
                self.bar = tqdm(total=rounds, initial=done, unit="round", desc="training")
        self.rounds = rounds

    def __call__(self, text: str) -> None:
        record = json.loads(text)
        accuracy = record.get("test_accuracy")
        if self.bar is not None:
            if accuracy is not None:
                self.bar.set_postfix_str(f"test acc {100 * accuracy:.2f}%", refresh=False)
            self.bar.update(record["round"] - self.bar.n)
        elif self.lines and accuracy is not None:
            print(
                f"round {record['round']}/{self.rounds}  test acc {100 * accuracy:.2f}%",
                file=sys.stdout,
                flush=True,
            )
        if self.on_round is not None:
            self.on_round(record)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
