"""create_redis: one bounded, blocking pool per client, bytes responses."""

from __future__ import annotations

import os

import pytest
from redis.asyncio import BlockingConnectionPool, SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool

from sharedos_redis.errors import ConfigurationError
from sharedos_redis.store.client import RedisSettings, create_pool, create_redis

pytestmark = pytest.mark.anyio


async def test_client_uses_a_bounded_blocking_pool() -> None:
    settings = RedisSettings.from_url("redis://127.0.0.1:1/3", max_connections=5,
                                      socket_timeout_s=2.5)
    client = create_redis(settings)
    try:
        pool = client.connection_pool
        assert isinstance(pool, BlockingConnectionPool)
        assert pool.max_connections == 5
        assert pool.connection_kwargs["socket_timeout"] == 2.5
        assert pool.connection_kwargs["db"] == 3
        assert not pool.connection_kwargs.get("decode_responses", False)
    finally:
        await client.aclose()


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        RedisSettings(max_connections=0)
    assert RedisSettings().max_connections == 16


@pytest.mark.real_redis
async def test_client_reaches_a_real_server() -> None:
    url = os.environ.get("REDIS_URL") or pytest.skip("REDIS_URL is not set")
    client = create_redis(RedisSettings.from_url(url, max_connections=2))
    try:
        assert await client.ping()
    finally:
        await client.aclose()


def test_tls_url_carries_ca_client_cert_and_checks_hostnames_by_default() -> None:
    settings = RedisSettings.from_url("rediss://u:secret@127.0.0.1:6380/2",
                                      ssl_ca_certs="/ca.pem", ssl_certfile="/c.pem",
                                      ssl_keyfile="/k.pem")
    pool = create_pool(settings)
    assert issubclass(pool.connection_class, SSLConnection)
    kwargs = pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == "/ca.pem" and kwargs["ssl_certfile"] == "/c.pem"
    assert kwargs["ssl_check_hostname"] is True and kwargs["ssl_cert_reqs"] == "required"
    assert kwargs["username"] == "u" and kwargs["password"] == "secret" and kwargs["db"] == 2
    assert "secret" not in repr(settings)
    assert settings.redacted_url() == "rediss://u:***@127.0.0.1:6380/2"


def test_tls_files_without_a_tls_url_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not rediss"):
        RedisSettings.from_url("redis://127.0.0.1:6379/0", ssl_ca_certs="/ca.pem")
    with pytest.raises(ConfigurationError, match="scheme"):
        RedisSettings.from_url("http://127.0.0.1/")


def test_sentinel_url_names_the_primary_and_its_database() -> None:
    settings = RedisSettings.from_url(
        "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/3",
        sentinel_password="spw")
    pool = create_pool(settings)
    assert isinstance(pool, SentinelConnectionPool) and isinstance(pool, BlockingConnectionPool)
    assert pool.service_name == "mymaster" and pool.max_connections == 16
    assert pool.connection_kwargs["db"] == 3 and pool.connection_kwargs["password"] == "pw"
    sentinels = pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["port"],
             s.connection_pool.connection_kwargs["password"]) for s in sentinels] == [
        (26379, "spw"), (26380, "spw")]
    for bad in ("redis+sentinel://127.0.0.1:26379", "redis+sentinel://127.0.0.1/m"):
        with pytest.raises(ConfigurationError):
            create_pool(RedisSettings.from_url(bad))


def test_settings_from_environment_and_overrides() -> None:
    env = {"SHAREDOS_REDIS_URL": "rediss://127.0.0.1:7000/1", "SHAREDOS_REDIS_USERNAME": "acme",
           "SHAREDOS_REDIS_PASSWORD": "pw", "SHAREDOS_REDIS_SSL_CA_CERTS": "/ca.pem",
           "SHAREDOS_REDIS_SSL_CHECK_HOSTNAME": "false", "SHAREDOS_REDIS_MAX_CONNECTIONS": "3",
           "UNRELATED": "x"}
    settings = RedisSettings.from_env(env, max_connections=4)
    assert (settings.url, settings.username, settings.ssl_ca_certs) == (
        "rediss://127.0.0.1:7000/1", "acme", "/ca.pem")
    assert settings.password is not None and settings.password.get_secret_value() == "pw"
    assert settings.ssl_check_hostname is False and settings.max_connections == 4
    assert RedisSettings.from_env({}).url == "redis://127.0.0.1:6379/0"
    with pytest.raises(ConfigurationError, match="max_connections"):
        RedisSettings.from_env({"SHAREDOS_REDIS_MAX_CONNECTIONS": "many"})


def test_settings_fields_win_over_the_url_and_query_passwords_are_redacted() -> None:
    settings = RedisSettings.from_url("redis://:urlpw@127.0.0.1:6379/0", password="override",
                                      db=3, username="acme")
    kwargs = create_pool(settings).connection_kwargs
    assert (kwargs["password"], kwargs["db"], kwargs["username"]) == ("override", 3, "acme")
    query = RedisSettings.from_url("redis://127.0.0.1:6379/0?password=secret&db=1")
    assert "secret" not in query.redacted_url() and "db=1" in query.redacted_url()
