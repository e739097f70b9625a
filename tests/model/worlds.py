"""The kernel world the driver tests share: alice may run, ask carol and read reports."""

from __future__ import annotations

from sharedos_redis.kernel.contracts import JsonValue
from tests.kernel.kernel_world import (
    ALICE,
    CAROL,
    World,
    grant,
    invoke_grant,
    make_world,
    send_grant,
)

ATLAS: JsonValue = {"text": "Atlas is green"}


def alice_world(output: JsonValue = ATLAS) -> World:
    """alice's grants (turns, asking carol, reading files/reports) and a recording file tool."""
    built = make_world(invoke_grant("g-inv", ALICE), send_grant("g-send", ALICE, CAROL),
                       grant("g-read", ALICE, "files", ["reports"], ["read"]))
    built.register_files(output=output)
    return built
