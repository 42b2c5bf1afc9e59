"""fedsim: a federated-learning simulator that runs a whole federation on one machine.

The engine is the one the ``fedsim`` command runs, so an experiment gives the same bits from
Python as from the command line. Load an experiment from a file or a dict, run it, and read
what it wrote::

    import fedsim

    experiment = fedsim.Experiment("experiments/mnist-fedavg.json", federation__rounds=5)
    run = experiment.run()
    run.summary["final_accuracy"]
    run.metrics          # one row per round: a pandas DataFrame, or a list of dicts
    run.model            # the final model's flat parameters, a NumPy float32 array

Training runs with the interpreter's lock released; Ctrl-C (``KeyboardInterrupt``) stops a run
at the next round boundary and :func:`resume` continues it to the same bits. The catalogues of
what an experiment can name are tables: :func:`strategies`, :func:`models`, :func:`datasets`,
:func:`schemes`. :func:`sweep` plays a sweep file and returns its :class:`Report`, which a
notebook shows inline. A :class:`Strategy` subclass registered with :func:`register_strategy`
is an algorithm written in NumPy that experiments name as they name the built-ins, and
:func:`register_dataset` names NumPy arrays as a data set.
"""

from .catalogue import datasets, models, schemes, strategies
from .dataset import register_dataset
from .errors import FedsimError, InputError, Stopped
from .experiment import Experiment, Run, resume
from .live import LiveChart
from .report import Chart, Report, report, sweep
from .strategy import (
    Candidates,
    Round,
    Setting,
    Strategy,
    Updates,
    conformance,
    register_strategy,
)

__all__ = [
    "Candidates",
    "Chart",
    "Experiment",
    "FedsimError",
    "InputError",
    "LiveChart",
    "Report",
    "Round",
    "Run",
    "Setting",
    "Stopped",
    "Strategy",
    "Updates",
    "conformance",
    "datasets",
    "models",
    "register_dataset",
    "register_strategy",
    "report",
    "resume",
    "schemes",
    "strategies",
    "sweep",
]
__version__ = "0.1.0"
