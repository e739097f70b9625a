"""The sharedos-redis benchmark suite (``python -m bench``; see ``bench/README.md``).

Measures, against one Redis server: the raw Streams request/reply floor, a bare arq
job round trip, the full ``messages.request`` path with a worker process (and on
fakeredis in-process, for reference), and the Redis cost of one request.
"""

__all__: list[str] = []
