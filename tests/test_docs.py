"""The examples in README.md, docs/*.md and the docstrings run as written.

A ```python block preceded by the line `<!-- no-test -->` is skipped (blocks that need a GPU, a real
checkpoint or the Hub); every other block runs, in order, in one namespace per file.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import hf_lrdwm

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"(<!-- no-test -->\s*\n)?```python\n(.*?)```", re.S)


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _doc_files(), ids=lambda p: p.name)
def test_markdown_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = path.read_text(encoding="utf-8")
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    for skip, code in _BLOCK.findall(text):
        if skip:
            continue
        exec(compile(code, f"{path.name}", "exec"), namespace)  # noqa: S102 - the docs are ours


def _modules() -> list[str]:
    names = [hf_lrdwm.__name__]
    for info in pkgutil.walk_packages(hf_lrdwm.__path__, prefix="hf_lrdwm."):
        names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)  # the test extra installs every optional dependency
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False)
    assert result.failed == 0
