"""Data sets registered from Python: NumPy arrays under a name an experiment's ``data`` section
gives, beside the built-ins::

    fedsim.register_dataset("blobs", x_train, y_train, x_test, y_test)
    fedsim.Experiment({..., "data": {"dataset": "blobs"}, ...})

The arrays go through the checks a file of arrays goes through (``{"dataset": "numpy"}``), and
give the same bits: features of ``[samples, features]`` are rows, ``[samples, height, width]``
one-channel images, ``[samples, height, width, channels]`` images (or channels first, with
``channels="first"``); ``uint8`` features are scaled to ``[0, 1]``, float features used as they
are; labels are integers from 0; a feature that is NaN or infinite is refused when an
experiment loads it.
"""

from __future__ import annotations

import io
from typing import Any, Optional

import numpy as np

from . import _fedsim


def _npy(array: Any) -> bytes:
    """``array`` as the bytes ``np.save`` writes."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def register_dataset(
    name: str,
    x_train: Any,
    y_train: Any,
    x_test: Any,
    y_test: Any,
    *,
    clients: Optional[Any] = None,
    test_clients: Optional[Any] = None,
    channels: str = "last",
    about: Optional[str] = None,
) -> None:
    """Registers the arrays as the data set ``name``, for this interpreter's experiments and
    sweeps. Registering a name again replaces the arrays; a built-in's name is refused.

    Args:
        x_train, y_train, x_test, y_test: features and labels of the training split (divided
            among the clients) and of the test split (the server's).
        clients, test_clients: each training and each test sample's client (integers from
            0), for the ``natural`` partition (``federation.num_clients`` then equals the
            number of clients), each client scored on its own test samples; given together.
        channels: ``"last"`` or ``"first"``: where 4-D image arrays keep their channels.
        about: the catalogue's line about it.

    Raises:
        InputError: an array's shape or type is not one fedsim reads; the message names it.
        ValueError: a taken or malformed name, or client ids that leave a client out.
    """
    if (clients is None) != (test_clients is None):
        raise TypeError("clients and test_clients go together: each sample's client, both splits")
    if channels not in ("last", "first"):
        raise ValueError(f'channels is "last" or "first", not {channels!r}')
    arrays = [np.asarray(a) for a in (x_train, y_train, x_test, y_test)]
    if about is None:
        about = (
            f"NumPy arrays registered from Python: {len(arrays[0])} training and "
            f"{len(arrays[2])} test samples of shape {tuple(arrays[0].shape[1:])}"
        )
    ids = None
    if clients is not None:
        ids = (
            [int(c) for c in np.asarray(clients).ravel()],
            [int(c) for c in np.asarray(test_clients).ravel()],
        )
    _fedsim.register_dataset(name, about, [_npy(a) for a in arrays], channels == "first", ids)
