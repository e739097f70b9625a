"""Validation at the edges: namespace ids where a host or the CLI is built, escaped output."""

from __future__ import annotations

import fakeredis
import pytest
from click.testing import CliRunner

from sharedos_redis.errors import ConfigurationError, ContractError
from sharedos_redis.kernel.contracts import checked_namespace_id
from sharedos_redis.worker.cli import _table, main
from sharedos_redis.worker.host import MessagingHost
from sharedos_redis.worker.printable import printable

HOSTILE_NAMESPACES = ["acme\n", " acme", "acme ", "ac\x1bme", "ac\x00me", "", "n" * 257,
                      "ac\x85me", "\ud800"]


@pytest.mark.parametrize("namespace", HOSTILE_NAMESPACES)
def test_a_host_refuses_a_namespace_that_would_split_the_keyspace(namespace: str) -> None:
    with pytest.raises(ContractError):
        checked_namespace_id(namespace)
    redis = fakeredis.FakeAsyncRedis()
    with pytest.raises(ConfigurationError):
        MessagingHost(redis, namespace=namespace, agents={})


@pytest.mark.parametrize("namespace", ["acme", "scheduler-example", "ünïcode ns", "a" * 256])
def test_ordinary_namespaces_pass_unchanged(namespace: str) -> None:
    assert checked_namespace_id(namespace) == namespace
    assert MessagingHost(fakeredis.FakeAsyncRedis(), namespace=namespace,
                         agents={}).namespace == namespace


@pytest.mark.parametrize("namespace", ["acme\n", " acme", "ac\x1b[2Jme"])
def test_the_cli_refuses_a_padded_namespace_before_connecting(namespace: str) -> None:
    result = CliRunner().invoke(main, ["--redis-url", "redis://127.0.0.1:1/0",
                                       "--namespace", namespace, "pending"])
    assert result.exit_code == 2
    assert "\x1b" not in result.output and "namespace" in result.output


@pytest.mark.parametrize(("raw", "shown"), [
    ("bob", "bob"), ("ünï", "ünï"),
    ("\x1b[2J\x1b[Hrm -rf", "\\u001b[2J\\u001b[Hrm -rf"),
    ("alice\rmallory", "alice\\u000dmallory"), ("a\nb", "a\\u000ab"),
    ("\u202eevil\u202c", "\\u202eevil\\u202c"), ("x\u2066y\u2069", "x\\u2066y\\u2069"),
    ("\x9b31m", "\\u009b31m"), ("a\u2028b", "a\\u2028b"), (7, "7"),
])
def test_printable_escapes_control_and_bidi_characters(raw: object, shown: str) -> None:
    assert printable(raw) == shown


def test_tables_print_model_chosen_ids_escaped() -> None:
    table = _table([{"id": "m-1\x1b]0;owned\x07", "purpose": "\u202eesrever"}],
                   ["id", "purpose"])
    assert "\x1b" not in table and "\x07" not in table and "\u202e" not in table
    assert "m-1\\u001b]0;owned\\u0007" in table
