"""``python -m scheduler_example``: run the example host and print what happened.

Default: an embedded fakeredis with the worker in this process — nothing to
install or start. ``--redis-url redis://...`` uses a real server; start the
worker beside it with ``sharedos-redis worker --app scheduler_example:host``
(or pass ``--in-process-worker`` to run it here as well).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Sequence

import anyio
from redis.asyncio import Redis

from sharedos_redis.store.client import RedisSettings
from sharedos_redis.worker.local import LocalWorker

from .app import build_host, issue_grants
from .scheduler import audit_summary, run_ticks
from .transcript import Transcript


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scheduler_example", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=3, help="scheduler ticks (default 3)")
    parser.add_argument("--seed", type=int, default=7, help="seed for the turn order")
    parser.add_argument("--redis-url", default=None,
                        help="a real Redis server (default: embedded fakeredis)")
    parser.add_argument("--namespace", default=None, help="namespace (default scheduler-example)")
    parser.add_argument("--model", default=os.environ.get("SHAREDOS_EXAMPLE_MODEL", "scripted"),
                        help="what drives bob and alice: scripted (default), openai:MODEL "
                             "(OPENAI_BASE_URL, OPENAI_API_KEY) or anthropic:MODEL "
                             "(ANTHROPIC_API_KEY)")
    parser.add_argument("--in-process-worker", action="store_true",
                        help="with --redis-url: run the worker in this process too")
    return parser.parse_args(argv)


@contextlib.asynccontextmanager
async def _client(url: str | None) -> AsyncIterator[Redis]:
    if url is None:
        import fakeredis

        client: Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        from sharedos_redis.store.client import RedisSettings, create_redis

        client = create_redis(RedisSettings.from_url(url))
    try:
        yield client
    finally:
        await client.aclose()


async def main(argv: Sequence[str] | None = None) -> int:
    """Run the example; returns the process exit code."""
    args = _parse(argv)
    transcript = Transcript()
    namespace = args.namespace or os.environ.get("SHAREDOS_NAMESPACE", "scheduler-example")
    async with _client(args.redis_url) as redis:
        connection = None if args.redis_url is None else RedisSettings.from_url(args.redis_url)
        host = build_host(redis, transcript=transcript, connection=connection,
                          namespace=namespace, model=args.model)
        backend = "embedded fakeredis" if args.redis_url is None else args.redis_url
        local = args.redis_url is None or args.in_process_worker
        transcript.say(f"sharedos-redis example: namespace {namespace!r} on {backend}, "
                       f"worker {'in this process' if local else 'in another process'}, "
                       f"bob and alice driven by the {args.model} model")
        await issue_grants(host, run_id=uuid.uuid4().hex[:8])
        async with host:
            if local:
                async with LocalWorker(host):
                    await run_ticks(host, transcript, ticks=args.ticks, seed=args.seed)
            else:
                await run_ticks(host, transcript, ticks=args.ticks, seed=args.seed)
        await _report(host, transcript)  # after the host's audit writer has flushed
    return 0


async def _report(host: object, transcript: Transcript) -> None:
    from sharedos_redis.worker.host import MessagingHost

    assert isinstance(host, MessagingHost)
    pending = await host.router.pending(host.namespace)
    transcript.say("")
    transcript.say(f"pending requests: {len(pending)}")
    for record in pending:
        transcript.say(f"  {record.id} {record.sender} -> {record.recipient} "
                       f"[{record.purpose}] {record.state} attempts={record.attempts}")
    transcript.say("audit summary (event, outcome, reason / cause: count):")
    for (kind, outcome, reason), count in sorted((await audit_summary(host)).items()):
        transcript.say(f"  {kind:22} {outcome:9} {reason or '-':45} {count:4}")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
