"""The kernel is host-neutral: it imports no redis, no arq (and no fakeredis)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import sharedos_redis.kernel

KERNEL_DIR = Path(sharedos_redis.kernel.__file__).parent
FORBIDDEN = ("redis", "arq", "fakeredis")

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import sharedos_redis.kernel as kernel
names = [info.name for info in pkgutil.walk_packages(kernel.__path__, "sharedos_redis.kernel.")]
for name in names:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"redis", "arq", "fakeredis"})
print(json.dumps({"modules": names, "loaded": loaded}))
"""

_FORBIDDEN_IMPORT = re.compile(
    r"^\s*(?:import\s+(?:redis|arq|fakeredis)\b|from\s+(?:redis|arq|fakeredis)\b"
    r"|import\s+[\w.]+\s*,\s*(?:redis|arq|fakeredis)\b)",
    re.MULTILINE,
)


def test_importing_every_kernel_module_loads_no_io_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "sharedos_redis.kernel.authorizer" in report["modules"]
    assert "sharedos_redis.kernel.contracts._base" in report["modules"]
    assert report["loaded"] == []


def test_kernel_source_has_no_io_imports() -> None:
    sources = sorted(KERNEL_DIR.rglob("*.py"))
    assert len(sources) > 5
    offenders = [
        f"{path.relative_to(KERNEL_DIR)}: {match.group(0).strip()}"
        for path in sources
        for match in _FORBIDDEN_IMPORT.finditer(path.read_text("utf-8"))
    ]
    assert offenders == []


def test_the_source_scan_would_catch_an_import() -> None:
    for line in ("import redis", "from redis.asyncio import Redis", "import arq.worker",
                 "    from arq import create_pool", "import os, redis", "import fakeredis"):
        assert _FORBIDDEN_IMPORT.search(line), line
    for line in ("import redistribute", "from .store import redis_key", "# import redis later"):
        assert not _FORBIDDEN_IMPORT.search(line), line
