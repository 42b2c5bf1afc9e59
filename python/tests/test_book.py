"""The book's Python page runs as written: its Python blocks, in order, in one namespace, from a
folder that holds the repository's experiments as the repository root does."""

import re
from pathlib import Path

import fedsim

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "src" / "how-to" / "python.md"


def python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_python_page_runs_as_written(tmp_path, monkeypatch):
    blocks = python_blocks(PAGE.read_text())
    assert len(blocks) >= 5, "the page's examples"
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert isinstance(namespace["run"], fedsim.Run)
    assert namespace["accuracy"], "the callback saw evaluated rounds"
    assert (tmp_path / "runs" / "long" / "summary.json").exists()
