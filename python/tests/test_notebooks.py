"""Every notebook runs top to bottom in a fresh kernel, as a student runs it, with its runs cut
to a few rounds: the tagged parameters cell is given a round count and a folder of the test's
own (holding the repository's experiments) for the runs. The notebooks are kept without
outputs, and their checks (a NumPy rule equals a built-in to the bit, the command line gives
the notebook's model) are assertions that fail the test."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from test_run import ROOT, fedsim_binary

NOTEBOOKS = sorted((ROOT / "python" / "notebooks").glob("*.ipynb"))


def test_the_tutorial_has_its_seven_steps_a_first_run_and_the_numpy_strategies():
    names = [path.stem for path in NOTEBOOKS]
    assert names[0] == "00-first-run" and names[-1] == "08-numpy-strategies"
    assert [name[:2] for name in names] == [f"{i:02d}" for i in range(9)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_notebook_is_stripped_and_runs_top_to_bottom(path, tmp_path, monkeypatch):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "outputs stripped"
    parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1, "one parameters cell"
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    parameters[0].source += f"\nROUNDS = 2\nROOT = {str(tmp_path)!r}\n"
    # The first notebook compares its model with the command line's, found on PATH.
    binary_dir = str(Path(fedsim_binary()).resolve().parent)
    monkeypatch.setenv("PATH", binary_dir + os.pathsep + os.environ["PATH"])
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if path.stem == "00-first-run":
        printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "the command line's model is this notebook's, bit for bit" in printed
