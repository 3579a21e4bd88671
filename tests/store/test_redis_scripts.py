"""The Redis store's Lua runner (``redis_scripts.py``) on a real Redis.

The conformance suite runs every store rule both through the function library (``redis``)
and with EVALSHA (``redis-eval``); these tests cover what it cannot: a server that lost the
library or the scripts, and a server without Redis Functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from celery_plus.stores.redis.backend import RedisBackend, _sources
from celery_plus.stores.redis.scripts import ScriptLibrary, library_source, pack
from celery_plus.transport.backend import NewJob, Settle
from tests.conformance.stores import REDIS_URL, redis_store


@pytest.fixture
def backend(tmp_path: object) -> Iterator[RedisBackend]:
    with redis_store(tmp_path) as open_backend:  # type: ignore[arg-type]
        made = open_backend()
        assert isinstance(made, RedisBackend)
        yield made
        made.close()


def own_library(client: redis.Redis) -> ScriptLibrary:
    """A library of the store's scripts under a name (and script hashes) no one else uses."""
    lib, bodies = _sources()
    return ScriptLibrary(client, f"{lib}\n-- {uuid.uuid4().hex}", bodies)


def test_the_library_turns_the_prelude_into_a_per_call_begin() -> None:
    lib, bodies = _sources()
    source = library_source("celery_plus_x", lib, {"publish": bodies["publish"]})
    assert source.startswith("#!lua name=celery_plus_x\n")
    assert "local P = ARGV[1]" not in source
    assert "local function begin(argv)" in source
    assert "redis.register_function('celery_plus_x_publish', function(keys, ARGV)\nbegin(ARGV)" \
        in source


def test_a_lib_without_prelude_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="@prelude"):
        library_source("x", "local P = ARGV[1]\n", {})


def test_a_lost_library_is_loaded_again_by_publish_and_by_a_pipeline(
        backend: RedisBackend) -> None:
    library = own_library(backend.client)
    backend.scripts = library
    try:
        outcome = backend.publish(NewJob(id="j1", queue="q", message="{}"))
        assert outcome.accepted
        backend.client.function_delete(library.library)
        backend.publish(NewJob(id="j2", queue="q", message="{}"))  # the direct hot path
        [claim] = backend.claim(["q"], "w", 1).claims
        backend.client.function_delete(library.library)
        # settle + claim go out in one pipeline: the whole pipeline is sent again
        result = backend.claim(["q"], "w", 1, [Settle(claim.job_id, claim.token, "ack")])
        assert [c.job_id for c in result.claims] == ["j2"]
        assert (backend.job("j1") or {}).get("st") == "completed"
    finally:
        backend.client.function_delete(library.library)


def test_a_server_without_functions_gets_evalsha_scripts(backend: RedisBackend) -> None:
    library = own_library(backend.client)
    backend.scripts = library
    error = redis.exceptions.ResponseError("unknown command 'FCALL', with args beginning with:")
    assert library.recover(error) is True
    assert library.functions is False
    assert library.command("claim", ["p"])[0] == "EVALSHA"
    assert backend.publish(NewJob(id="e1", queue="q", message="{}")).accepted
    assert [c.job_id for c in backend.claim(["q"], "w", 1).claims] == ["e1"]
    assert not backend.client.function_list(library=library.library)


def test_an_error_of_the_script_itself_is_raised(backend: RedisBackend) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        library = own_library(client)
        with pytest.raises(redis.exceptions.ResponseError, match="gmatch"):
            library.run("publish", [backend.prefix, "id", "q", "{}"])  # no fields argument
    finally:
        client.function_delete(library.library)
        client.close()


def test_pack_matches_redis_py() -> None:
    command = ("FCALL", "celery_plus_x_publish", 0, "p", "id-é", b"\x00raw", 12.5, "a\x1fb")
    packed = redis.connection.PythonRespSerializer(
        buffer_cutoff=1 << 30, encode=redis.connection.Encoder("utf-8", "strict", False).encode,
    ).pack(*command)
    assert pack(command) == b"".join(packed)
