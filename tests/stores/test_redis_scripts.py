"""The Redis store's Lua sources and runner (``stores/redis/scripts.py``), the runner on a real
Redis.

The conformance suite runs every store rule both through the function library (``redis``)
and with EVALSHA (``redis-eval``); these tests cover what it cannot: a server that lost the
library or the scripts, and a server without Redis Functions.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from importlib import resources

import pytest
import redis

from celery_plus.model import rules
from celery_plus.model.store import NewJob, Settle
from celery_plus.queue_migration.movers import migrate_script_source
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.scripts import (
    ADMIN_SCRIPTS,
    STORE_SCRIPTS,
    ScriptLibrary,
    admin_sources,
    lib_lua,
    library_source,
    pack,
    render_rules,
    store_sources,
    with_publish_job,
)
from tests.fast.conformance.stores import REDIS_URL, redis_store
from tests.inspectors import inspector_for


@pytest.fixture
def backend(tmp_path: object) -> Iterator[RedisBackend]:
    with redis_store(tmp_path) as open_backend:  # type: ignore[arg-type]
        made = open_backend()
        assert isinstance(made, RedisBackend)
        yield made
        made.close()


def own_library(client: redis.Redis) -> ScriptLibrary:
    """A library of the store's scripts under a name (and script hashes) no one else uses."""
    lib, bodies = store_sources()
    return ScriptLibrary(client, f"{lib}\n-- {uuid.uuid4().hex}", bodies)


def lua(path: str) -> str:
    """A Lua file of the Redis store, read here rather than through the module under test."""
    return (resources.files("celery_plus.stores.redis") / "lua" / path).read_text()


def lib() -> str:
    """``lib.lua`` as the scripts run it: the rules' constants in place of its ``@rules`` line."""
    source = lua("lib.lua")
    assert source.count("\n-- @rules\n") == 1
    return source.replace("\n-- @rules\n", "\n" + render_rules(), 1)


def test_lib_lua_gets_the_rules_constants_rendered_once() -> None:
    assert lib_lua() == lib()
    assert "@rules" not in lib_lua().replace("'-- @rules'", "")
    block = render_rules()
    assert f"local PRIORITY_FACTOR = {rules.PRIORITY_FACTOR}\n" in block
    assert f"local HISTORY_MAX = {rules.HISTORY_MAX}\n" in block
    assert "local WAITING = {['enqueued'] = true, ['scheduled'] = true, ['blocked'] = true}" \
        in block


@pytest.mark.parametrize("functions", [True, False], ids=["library", "evalsha"])
def test_the_rendered_constants_equal_the_rules_on_the_server(functions: bool) -> None:
    """What the scripts see (function library and EVALSHA alike) is model/rules.py's."""
    client = redis.Redis.from_url(REDIS_URL)
    probe = ("local function keys(set) local out = {} for k in pairs(set) do out[#out + 1] = k "
             "end table.sort(out) return out end "
             "return {PRIORITY_FACTOR, HISTORY_MAX, keys(WAITING), keys(FINISHED)}")
    library = ScriptLibrary(client, f"{lib_lua()}\n-- {uuid.uuid4().hex}", {"probe": probe})
    library.functions = functions
    try:
        factor, history, waiting, finished = library.run("probe", [f"p{uuid.uuid4().hex[:8]}"])
    finally:
        if functions:
            client.function_delete(library.library)
        client.close()
    assert factor == rules.PRIORITY_FACTOR and history == rules.HISTORY_MAX
    assert [w.decode() for w in waiting] == sorted(rules.WAITING)
    assert [f.decode() for f in finished] == sorted(rules.FINISHED)


def test_each_store_script_is_its_file_and_fire_also_publishes() -> None:
    lib_source, bodies = store_sources()
    assert lib_source == lib()
    assert sorted(bodies) == sorted(STORE_SCRIPTS)
    for name in set(STORE_SCRIPTS) - {"fire"}:
        assert bodies[name] == lua(f"{name}.lua"), name
    assert bodies["fire"] == lua("fire.lua") + "\n" + lua("publish.lua")


def test_each_admin_script_is_lib_then_the_index_helpers_if_it_needs_them_then_its_file() -> None:
    sources = admin_sources()
    assert sorted(sources) == sorted(ADMIN_SCRIPTS)
    index_lib = lua("admin/index_lib.lua")
    for name, source in sources.items():
        middle = index_lib if name.startswith("index_") else ""
        assert source == "\n".join([lib(), middle, lua(f"admin/{name}.lua")]), name


def test_with_publish_job_wraps_publish_lua_as_a_function_of_its_own_arguments() -> None:
    source = with_publish_job("return publish_job({'x'})")
    head, rest = source.split("local function publish_job(A)\n", 1)
    publish, body = rest.rsplit("\nend\n", 1)
    assert head == lib() + "\n"
    assert body == "return publish_job({'x'})"
    assert not re.search(r"\bARGV\b", publish)
    original = lua("publish.lua").splitlines()
    rewritten = publish.splitlines()
    assert all(new == old.replace("ARGV", "A")
               for new, old in zip(rewritten, original, strict=True))
    assert rewritten != original


def test_the_migrate_script_is_migrate_lua_storing_jobs_as_publish_does() -> None:
    own = (resources.files("celery_plus.queue_migration") / "migrate.lua").read_text()
    assert migrate_script_source() == with_publish_job(own)


def test_the_library_turns_the_prelude_into_a_per_call_begin() -> None:
    lib, bodies = store_sources()
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
        assert (inspector_for(backend).job("j1") or {}).get("st") == "completed"
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
        with pytest.raises(redis.exceptions.ResponseError, match="nil"):
            library.run("publish", [backend.prefix, "id", "q", "{}"])  # no fields arguments
    finally:
        client.function_delete(library.library)
        client.close()


def test_pack_matches_redis_py() -> None:
    command = ("FCALL", "celery_plus_x_publish", 0, "p", "id-é", b"\x00raw", 12.5, "a\x1fb")
    packed = redis.connection.PythonRespSerializer(
        buffer_cutoff=1 << 30, encode=redis.connection.Encoder("utf-8", "strict", False).encode,
    ).pack(*command)
    assert pack(command) == b"".join(packed)
