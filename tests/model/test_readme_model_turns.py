"""The README's "Model turns" example runs as written and prints what it says it prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_model_turns_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = README.read_text("utf-8").split("## Model turns", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    exec(compile(block, "README.md#model-turns", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip() == \
        'Alice says: {"status": "succeeded", "output": "Atlas is green."}'
