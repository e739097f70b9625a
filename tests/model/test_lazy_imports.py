"""The model package works without its optional SDKs: importing it loads none of them."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_model_package_loads_no_sdk() -> None:
    code = ("import sys, sharedos_redis.model as m; m.StandardRuntime; m.ScriptedDriver; "
            "print(sorted({'openai', 'anthropic', 'pydantic_ai', 'httpx2'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"
