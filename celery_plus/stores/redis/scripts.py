"""How the Redis store runs its Lua: one Redis Function library, or EVALSHA scripts.

Every script in ``lua/`` is ``lib.lua`` (the key schema and shared helpers) followed by the
script's own body. Run with ``EVALSHA``, Redis executes ``lib.lua`` again on every call —
defining every helper anew, about a third of a publish's time in the server. On Redis 7+
the same code is loaded once as a *function library* (``FUNCTION LOAD``), where the helpers
are defined once and each script is a function (``FCALL``); on Redis 6.2, scripts run with
``EVALSHA`` as before. The choice is made on the first call, with no extra round trip.

``lib.lua`` never retypes a rule's constant: its ``-- @rules`` line is replaced, wherever it
is used (:func:`lib_lua`), by :data:`celery_plus.model.rules.RENDERED` as Lua locals
(:func:`render_rules`: ``local PRIORITY_FACTOR = ...``, state sets as ``{[state] = true}``).

In the library, ``lib.lua``'s per-call prelude (the block between the ``@prelude`` markers:
the key prefix and the server clock) becomes ``begin(ARGV)``, run at the start of each
function. The library's name carries a hash of the sources, so processes of different
versions of celery-plus can share a server. A server that lost the library or the scripts
(a restart, ``FUNCTION FLUSH``, ``SCRIPT FLUSH``) gets them loaded again on the next call.

This module is also the one place that reads the Lua files and composes them: the store's
scripts (:func:`store_sources`), the admin's (:func:`admin_sources`: ``lib.lua``, then
``admin/index_lib.lua`` for the listing index's scripts, then the body) and scripts that store
jobs the way ``publish.lua`` does (:func:`with_publish_job`, for ``migrate-queue``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import redis

from celery_plus.model import rules

_PACKAGE = "celery_plus.stores.redis"
#: The store's scripts (``lua/<name>.lua``), each run after ``lib.lua``.
STORE_SCRIPTS = ("publish", "claim", "claim_job", "settle", "heartbeat", "recover", "maintain",
                 "purge", "lead", "fire", "rate_start", "pause", "worker_beat")
#: The admin's scripts (``lua/admin/<name>.lua``), each run after ``lib.lua``.
ADMIN_SCRIPTS = ("retry", "discard", "cancel", "delete", "index_sync", "index_page",
                 "index_counts", "summaries", "history_put", "walk")

_RULES = re.compile(r"^-- @rules\n", re.M)
_PRELUDE = re.compile(r"^-- @prelude begin.*?^-- @prelude end\n", re.S | re.M)

#: The prelude as it runs inside the library: the same values, assigned per call.
_LIBRARY_PRELUDE = """local P, NOW
local function begin(argv)
  P = argv[1]
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""


def read_lua(path: str, package: str | None = None) -> str:
    """The text of Lua file ``path``: under this store's ``lua/``, or in ``package`` if given."""
    root = resources.files(package) if package else resources.files(_PACKAGE) / "lua"
    return (root / path).read_text()


def render_rules(constants: Mapping[str, int | tuple[str, ...]] = rules.RENDERED) -> str:
    """``constants`` as Lua locals: numbers as numbers, state tuples as sets ``{[s] = true}``."""
    lines = ["-- rendered from celery_plus/model/rules.py (scripts.render_rules)"]
    for name, value in constants.items():
        if isinstance(value, tuple):
            members = ", ".join(f"[{_lua_string(v)}] = true" for v in value)
            lines.append(f"local {name} = {{{members}}}")
        else:
            lines.append(f"local {name} = {int(value)}")
    return "\n".join(lines) + "\n"


def _lua_string(text: str) -> str:
    if not re.fullmatch(r"[a-z_]+", text):
        raise ValueError(f"not a plain name: {text!r}")
    return f"'{text}'"


@functools.cache
def lib_lua() -> str:
    """``lib.lua`` with the rules' constants rendered in place of its ``-- @rules`` line."""
    lib = read_lua("lib.lua")
    if len(_RULES.findall(lib)) != 1:
        raise ValueError("lib.lua needs exactly one '-- @rules' line")
    return _RULES.sub(lambda _: render_rules(), lib)


@functools.cache
def store_sources() -> tuple[str, dict[str, str]]:
    """``lib.lua`` and the body of each of :data:`STORE_SCRIPTS` (read once per process)."""
    bodies = {name: read_lua(f"{name}.lua") for name in STORE_SCRIPTS}
    # A tick is published by publish.lua's own body, in the same script as its fence.
    bodies["fire"] += "\n" + bodies["publish"]
    return lib_lua(), bodies


@functools.cache
def admin_sources() -> dict[str, str]:
    """The source of each of :data:`ADMIN_SCRIPTS`: ``lib.lua``, the listing index's helpers
    (``admin/index_lib.lua``, for the ``index_*`` scripts only), then the script's body."""
    lib, index_lib = lib_lua(), read_lua("admin/index_lib.lua")
    return {name: "\n".join([lib, index_lib if name.startswith("index_") else "",
                             read_lua(f"admin/{name}.lua")])
            for name in ADMIN_SCRIPTS}


def with_publish_job(body: str) -> str:
    """``body`` after ``lib.lua`` and ``publish.lua`` as ``publish_job(A)`` (``A`` for ``ARGV``),
    so that ``body`` can store jobs exactly as a publish does."""
    publish = re.sub(r"\bARGV\b", "A", read_lua("publish.lua"))
    return "\n".join((lib_lua(), "local function publish_job(A)", publish, "end", body))


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def library_source(name: str, lib: str, bodies: Mapping[str, str]) -> str:
    """The Redis Function library holding every script of ``bodies`` as ``<name>_<script>``."""
    if not _PRELUDE.search(lib):
        raise ValueError("lib.lua has no '-- @prelude begin' / '-- @prelude end' block")
    parts = [f"#!lua name={name}", _PRELUDE.sub(lambda _: _LIBRARY_PRELUDE, lib, count=1)]
    for script, body in bodies.items():
        parts.append(
            f"redis.register_function('{name}_{script}', function(keys, ARGV)\n"
            f"begin(ARGV)\n{body}\nend)"
        )
    return "\n".join(parts) + "\n"


def pack(command: Sequence[Any]) -> bytes:
    """``command`` in the Redis protocol (RESP), as redis-py would send it, in one buffer.

    For the publish hot path: redis-py's general packer costs several times more. Text
    is sent as UTF-8, numbers in their decimal form.
    """
    out = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _missing(exc: redis.exceptions.ResponseError) -> bool:
    """True for a server that does not have the library or script (any more)."""
    text = str(exc)
    return isinstance(exc, redis.exceptions.NoScriptError) or "Function not found" in text


def _no_functions(exc: redis.exceptions.ResponseError) -> bool:
    """True for a server without Redis Functions (before 7.0)."""
    text = str(exc).lower()
    return "unknown command" in text and ("fcall" in text or "function" in text)


class ScriptLibrary:
    """The store's scripts on one Redis server: build commands, run them, reload if lost."""

    def __init__(self, client: redis.Redis, lib: str, bodies: Mapping[str, str]) -> None:
        self.client = client
        self._eval_sources = {name: f"{lib}\n{body}" for name, body in bodies.items()}
        self._shas = {name: _sha1(src) for name, src in self._eval_sources.items()}
        digest = _sha1("\n".join([lib, *bodies.values()]))[:16]
        self.library = f"celery_plus_{digest}"
        self._library_source = library_source(self.library, lib, bodies)
        #: FCALL of the library's functions; False once the server turned out to have none.
        self.functions = True

    def command(self, name: str, args: Sequence[Any]) -> tuple[Any, ...]:
        """The command that runs script ``name`` with ``args`` (for a connection or pipeline)."""
        # KEYS[1] is the key prefix (ARGV[1]): every key a script touches starts with it, so
        # on a Redis Cluster its hash tag routes the call to the slot of all those keys.
        if self.functions is False:
            return ("EVALSHA", self._shas[name], 1, args[0], *args)
        return ("FCALL", f"{self.library}_{name}", 1, args[0], *args)

    def recover(self, exc: redis.exceptions.ResponseError) -> bool:
        """After ``exc`` from a command of :meth:`command`: make the next try work.

        Loads the library (or, on a server without functions, the scripts) when the error
        says they are missing. False if ``exc`` is an error of the script itself.
        """
        if self.functions is not False and _no_functions(exc):
            self.functions = False
            self._load_scripts()
            return True
        if not _missing(exc):
            return False
        if self.functions is False:
            self._load_scripts()
        else:
            self.client.function_load(self._library_source, replace=True)
        return True

    def _load_scripts(self) -> None:
        for source in self._eval_sources.values():
            self.client.script_load(source)

    def run(self, name: str, args: Sequence[Any]) -> Any:
        """Run script ``name`` through the client (its connection pool and retry policy)."""
        try:
            return self.client.execute_command(*self.command(name, args))
        except redis.exceptions.ResponseError as exc:
            if not self.recover(exc):
                raise
        return self.client.execute_command(*self.command(name, args))

    def pipeline(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Run several scripts in one round trip (not a transaction); their replies in order.

        Nothing ran if the server lacked the scripts: the library is loaded and the whole
        pipeline sent again.
        """
        for attempt in range(2):
            pipe = self.client.pipeline(transaction=False)
            for name, args in calls:
                pipe.execute_command(*self.command(name, args))
            replies = pipe.execute(raise_on_error=False)
            errors = [r for r in replies if isinstance(r, redis.exceptions.ResponseError)]
            if not errors:
                return replies
            lost = len(errors) == len(replies) and all(
                _missing(e) or _no_functions(e) for e in errors)
            if attempt or not lost:
                raise errors[0]
            self.recover(errors[0])
        raise AssertionError("unreachable")
