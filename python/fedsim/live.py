"""A chart that grows as a run's rounds finish, for notebooks."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import _fedsim


class LiveChart:
    """Test accuracy by round, redrawn after each evaluated round: pass it as a run's
    ``on_round``::

        chart = fedsim.LiveChart()
        run = experiment.run(on_round=chart)

    In Jupyter it is drawn below the cell as the first round is evaluated and redrawn in place
    after each one; elsewhere it only collects the points. Either way it shows itself, as the
    report's charts do, wherever an SVG can be shown (``chart`` as a cell's last line).

    Args:
        label: the line's name in the legend.
        target: a test accuracy (a fraction) to draw as a dashed line.
    """

    def __init__(self, label: str = "test accuracy", target: Optional[float] = None) -> None:
        self.label = label
        self.target = target
        self.points: List[Tuple[float, float]] = []
        """(round, test accuracy) of each evaluated round so far."""
        self._handle: Any = None

    def __call__(self, record: Dict[str, Any]) -> None:
        accuracy = record.get("test_accuracy")
        if accuracy is None:
            return
        self.points.append((float(record["round"]), float(accuracy)))
        self._redraw()

    def _repr_svg_(self) -> str:
        return _fedsim.line_chart(
            "Test accuracy by round",
            "round",
            "test accuracy (%)",
            100.0,
            [(self.label, self.points)],
            None if self.target is None else (self.target, f"target {100 * self.target:g}%"),
        )

    def _redraw(self) -> None:
        try:
            from IPython import get_ipython
            from IPython.display import SVG, display
        except ImportError:
            return
        if get_ipython() is None:
            return
        drawing = SVG(self._repr_svg_())
        if self._handle is None:
            self._handle = display(drawing, display_id=True)
        else:
            self._handle.update(drawing)

    def __repr__(self) -> str:
        return f"LiveChart({len(self.points)} rounds)"
