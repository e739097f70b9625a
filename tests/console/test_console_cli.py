"""``sharedos-redis console`` refuses what it must before serving anything."""

from __future__ import annotations

from click.testing import CliRunner

from sharedos_redis.worker.cli import main


def test_a_non_loopback_bind_needs_a_token() -> None:
    done = CliRunner().invoke(main, ["--namespace", "acme", "console", "--host", "0.0.0.0"],
                              env={"SHAREDOS_CONSOLE_TOKEN": ""})
    assert done.exit_code == 2 and "needs --token" in done.output


def test_a_namespace_is_required() -> None:
    done = CliRunner().invoke(main, ["console"], env={"SHAREDOS_NAMESPACE": ""})
    assert done.exit_code == 2 and "--namespace" in done.output
