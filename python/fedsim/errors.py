"""The exceptions fedsim raises.

Each says what the command line says for the same mistake. Bad input (an experiment file, a
field, an override, a data file: what ``fedsim run`` exits 2 for) is an :class:`InputError`,
which is a ``ValueError`` too.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class FedsimError(Exception):
    """An experiment could not run; the message says why."""


class InputError(FedsimError, ValueError):
    """The input is at fault: an experiment, a field, an override or a data file.

    Attributes:
        file: the experiment file (or the label of an experiment given as a dict), if the
            experiment is at fault.
        problems: one dict per field at fault, with ``field`` (its dotted path, as ``--set``
            names it), ``message`` (what is wrong and what is expected) and ``set_by`` (the
            override that gave the field its value, or ``None``).
    """

    file: Optional[str] = None
    problems: List[Dict[str, Any]] = []


class Stopped(FedsimError):
    """The run stopped at a round boundary before its last round; its folder resumes it.

    Attributes:
        round: the last round finished, which the folder's checkpoint holds.
    """

    round: int = 0
