"""Task extension options: parsing, validation, argument binding and message headers.

This module owns the decorator keyword arguments celery-plus adds to ``@app.task`` (``unique``,
``unique_by``, ``unique_window``, ``unique_ttl``, ``unique_on_duplicate``, ``concurrency``,
``concurrency_key``, ``max_deliveries``, ``rate_limit_scope``, ``rate_limit_key``, and
Celery's own ``rate_limit`` once it is cluster-scoped), their decoration-time validation, the
binding of call arguments to the task signature (the *payload*) and the compact header that
carries the resolved unique key / concurrency scope / rate group with each message.
"""

from __future__ import annotations

import datetime
import difflib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import celery
from celery.exceptions import ImproperlyConfigured

from celery_plus.send.keys import canonical_json, concurrency_scope, unique_key

__all__ = [
    "EXTENSION_OPTIONS",
    "UNIQUE_ON_DUPLICATE",
    "UNIQUE_WINDOWS",
    "PayloadBinder",
    "TaskExtensions",
    "message_extensions",
    "parse_extensions",
]

EXTENSION_OPTIONS: frozenset[str] = frozenset(
    {
        "unique",
        "unique_by",
        "unique_window",
        "unique_ttl",
        "unique_on_duplicate",
        "concurrency",
        "concurrency_key",
        "max_deliveries",
        "rate_limit_scope",
        "rate_limit_key",
    }
)
RATE_LIMIT_SCOPES = ("worker", "cluster")
#: Seconds per unit of Celery's rate strings ("10/s", "60/m", "100/h").
RATE_UNITS = {"s": 1, "m": 60, "h": 3600}
#: A cluster rate's starts per window and its window fit every store's integers (PostgreSQL's
#: ``integer`` column; a window added to now exact in a Lua double).
MAX_RATE_COUNT = 2**31 - 1
MAX_RATE_WINDOW_MS = 2**45
UNIQUE_WINDOWS = ("pending", "running", "ttl")
UNIQUE_ON_DUPLICATE = ("return", "raise")
DEFAULT_UNIQUE_WINDOW = "running"


@dataclass(frozen=True)
class TaskExtensions:
    """Validated extension options of one task.

    ``var_keyword`` is the name of the task's ``**kwargs`` parameter (if any): ``unique_by`` /
    ``concurrency_key`` fields that are not named parameters are looked up inside it.
    """

    unique: bool = False
    unique_by: tuple[str, ...] = ()
    unique_window: str | None = None
    unique_ttl: float | None = None
    unique_on_duplicate: str = "return"
    concurrency: int | None = None
    concurrency_key: str | None = None
    max_deliveries: int | None = None
    #: Cluster rate limit: at most ``rate_limit`` starts per ``rate_window_ms`` across every
    #: worker (per value of ``rate_limit_key`` when given); None: Celery's own per-worker
    #: ``rate_limit`` (if any) applies instead.
    rate_limit: int | None = None
    rate_window_ms: int = 0
    rate_limit_key: str | None = None
    var_keyword: str | None = None

    @property
    def needs_late_ack(self) -> bool:
        """True when the task must ack late (concurrency slots or a running window)."""
        return self.concurrency is not None or self.unique_window == "running"

    @property
    def is_empty(self) -> bool:
        """True when no extension is in use."""
        return (not self.unique and self.concurrency is None and self.max_deliveries is None
                and self.rate_limit is None)


def _fail(
    task_name: str, option: str, value: object, problem: str, fix: str
) -> ImproperlyConfigured:
    return ImproperlyConfigured(
        f"task {task_name!r}: invalid {option}={value!r}: {problem}. Fix: {fix}."
    )


def _celery_attribute(name: str) -> bool:
    return any(name in vars(klass) for klass in celery.Task.__mro__)


def check_option_names(task_name: str, attributes: Mapping[str, object],
                       source: str = "") -> None:
    """Fail on a task attribute that is no option but one of the extension options misspelt
    (``rate_limit_scop="cluster"`` would otherwise leave Celery's per-worker limit, silently:
    the limit times the processes). ``attributes``: the decorator's options or the task
    class's own; Celery's task attributes, methods and private names are left alone.

    Celery's attributes are looked up in the classes' dictionaries, never read: reading
    ``celery.Task.app`` binds Celery's base ``Task`` to the current app, copying that app's
    ``task_acks_late`` and the other ``from_config`` settings onto the base class for every
    task made afterwards (a plain Celery default app's ``acks_late=False``, when the
    celery-plus app is not the current one, as in ``celery_plus.contrib.pytest``'s).

    ``source``: where the attributes were given, when not on the task itself (an entry of
    ``task_annotations``); the error names it."""
    for name, value in attributes.items():
        if (name in EXTENSION_OPTIONS or name.startswith("_") or _celery_attribute(name)
                or callable(value) or isinstance(value, (classmethod, staticmethod, property))):
            continue
        close = difflib.get_close_matches(name, EXTENSION_OPTIONS, n=1, cutoff=0.8)
        if close and source:
            raise ImproperlyConfigured(
                f"task {task_name!r}: {source} sets {name}={value!r}, which is not an "
                f"option (did you mean {close[0]!r}?). Fix: write {close[0]!r} in {source}.")
        if close:
            raise _fail(task_name, name, value, "is not an option",
                        f"write {close[0]}={value!r}")


def _signature(fun: Callable[..., object]) -> inspect.Signature | None:
    try:
        return inspect.signature(fun)
    except (TypeError, ValueError):
        return None


def _user_parameters(sig: inspect.Signature, bound: bool) -> list[inspect.Parameter]:
    """Parameters the caller supplies (``self`` dropped for bound tasks)."""
    params = list(sig.parameters.values())
    if (
        bound
        and params
        and params[0].kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        params = params[1:]
    return params


def _var_keyword(params: Sequence[inspect.Parameter]) -> str | None:
    for param in params:
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            return param.name
    return None


class _FieldChecker:
    """Checks that option values name parameters of the task function."""

    def __init__(self, fun: Callable[..., object], bound: bool, task_name: str) -> None:
        self.task_name = task_name
        sig = _signature(fun)
        self.inspectable = sig is not None
        params = _user_parameters(sig, bound) if sig is not None else []
        self.names = tuple(p.name for p in params)
        self.var_keyword = _var_keyword(params)

    def check(self, option: str, value: object, name: object) -> str:
        if not isinstance(name, str) or not name:
            raise _fail(
                self.task_name,
                option,
                value,
                f"field names must be non-empty strings, got {name!r}",
                "name the task parameter(s) as strings",
            )
        if not self.inspectable:
            raise _fail(
                self.task_name,
                option,
                value,
                "the task function's signature cannot be inspected",
                f"drop {option} or use a plain Python function",
            )
        if name in self.names or self.var_keyword is not None:
            return name
        raise _fail(
            self.task_name,
            option,
            value,
            f"the task has no parameter named {name!r} "
            f"(parameters: {', '.join(self.names) or 'none'})",
            "use one of the task's parameter names",
        )


def _positive_int(task_name: str, option: str, value: object, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(task_name, option, value, "must be an integer >= 1", fix)
    return value


def parse_rate(task_name: str, value: object) -> tuple[int, int]:
    """Celery's ``rate_limit`` (``"60/m"``, ``"10/s"``, ``"100/h"``, or a number per second)
    as (starts, window ms): ``"60/m"`` is (60, 60000); below one per unit, one per longer
    window (``"0.5/s"`` is (1, 2000)). The unit is one of Celery's (``"10/ms"`` and
    ``"10/sec"`` are not rates to Celery either); the count and the window fit the stores'
    integers (``MAX_RATE_COUNT``, ``MAX_RATE_WINDOW_MS``)."""
    fix = "use Celery's form, e.g. rate_limit='60/m' (per s, m or h)"
    text = str(value).strip() if isinstance(value, (str, int, float)) else ""
    count_text, _, unit = text.partition("/")
    seconds = RATE_UNITS.get(unit.strip() or "s")
    try:
        count = float(count_text)
    except ValueError:
        count = -1.0
    if count == 0 and seconds is not None and not isinstance(value, bool):
        raise _fail(task_name, "rate_limit", value, "0 is Celery's 'no limit'",
                    "drop rate_limit_scope / rate_limit_key, or give a rate, e.g. '60/m'")
    if isinstance(value, bool) or seconds is None or not math.isfinite(count) or count <= 0:
        raise _fail(task_name, "rate_limit", value, "is not a rate", fix)
    starts, window_ms = ((1, round(seconds * 1000 / count)) if count < 1
                         else (int(count), seconds * 1000))
    if count >= 1 and count != int(count):
        raise _fail(task_name, "rate_limit", value, "a cluster rate needs a whole count",
                    f"use e.g. rate_limit='{round(count * 60)}/m'")
    if starts > MAX_RATE_COUNT or window_ms > MAX_RATE_WINDOW_MS:
        raise _fail(task_name, "rate_limit", value, "is beyond what the store counts",
                    f"at most {MAX_RATE_COUNT} starts per window, and at least one start "
                    f"per {MAX_RATE_WINDOW_MS // 86_400_000} days")
    return starts, window_ms


def _cluster_rate(given: Mapping[str, object], options: Mapping[str, object],
                  checker: _FieldChecker, task_name: str) -> tuple[int | None, int, str | None]:
    """The cluster rate limit of the options: (starts, window ms, key field), or Nones."""
    scope = given.get("rate_limit_scope")
    if scope is not None and scope not in RATE_LIMIT_SCOPES:
        raise _fail(task_name, "rate_limit_scope", scope,
                    f"must be one of {', '.join(map(repr, RATE_LIMIT_SCOPES))}",
                    "use 'cluster' (every worker together) or 'worker' (Celery's own)")
    key = given.get("rate_limit_key")
    if key is not None and scope == "worker":
        raise _fail(task_name, "rate_limit_key", key, "needs the cluster scope",
                    "drop rate_limit_scope='worker' (a keyed limit is cluster-wide)")
    if scope != "cluster" and key is None:
        return None, 0, None
    option = "rate_limit_key" if key is not None else "rate_limit_scope"
    if options.get("rate_limit") is None:
        raise _fail(task_name, option, given[option], "needs a rate_limit",
                    "add rate_limit='<starts>/<s|m|h>', e.g. rate_limit='60/m'")
    limit, window_ms = parse_rate(task_name, options["rate_limit"])
    field = checker.check("rate_limit_key", key, key) if key is not None else None
    return limit, window_ms, field


def parse_extensions(
    fun: Callable[..., object],
    options: Mapping[str, object],
    *,
    bound: bool,
    task_name: str,
) -> TaskExtensions:
    """Validate the extension options in ``options`` (others ignored) for task ``fun``.

    An option given as ``None`` counts as not given.  Raises ``ImproperlyConfigured``.
    """
    given = {k: v for k, v in options.items() if k in EXTENSION_OPTIONS and v is not None}
    checker = _FieldChecker(fun, bound, task_name)

    # -- unique ---------------------------------------------------------------------------
    unique_opt = given.get("unique")
    if "unique" in given and not isinstance(unique_opt, bool):
        raise _fail(task_name, "unique", unique_opt, "must be True or False", "pass unique=True")
    unique_related = [k for k in ("unique_by", "unique_ttl", "unique_window") if k in given]
    if unique_opt is False and unique_related:
        first = unique_related[0]
        raise _fail(
            task_name,
            first,
            given[first],
            "conflicts with unique=False",
            f"drop unique=False (giving {first} makes the task unique) or drop {first}",
        )
    unique = unique_opt is True or "unique_by" in given or "unique_ttl" in given
    for opt in ("unique_window", "unique_on_duplicate"):
        if opt in given and not unique:
            raise _fail(
                task_name,
                opt,
                given[opt],
                "only applies to unique tasks",
                f"add unique=True (or unique_by=[...]) or drop {opt}",
            )

    unique_by: tuple[str, ...] = ()
    if "unique_by" in given:
        raw_by = given["unique_by"]
        fields = [raw_by] if isinstance(raw_by, str) else raw_by
        if not isinstance(fields, (list, tuple)) or not fields:
            raise _fail(
                task_name,
                "unique_by",
                raw_by,
                "must be a non-empty list of parameter names",
                "pass e.g. unique_by=['customer_id'], or unique=True to key on all arguments",
            )
        unique_by = tuple(checker.check("unique_by", raw_by, name) for name in fields)
        if len(set(unique_by)) != len(unique_by):
            raise _fail(
                task_name,
                "unique_by",
                raw_by,
                "names a parameter more than once",
                "list each parameter once",
            )

    unique_ttl: float | None = None
    if "unique_ttl" in given:
        raw_ttl = given["unique_ttl"]
        if isinstance(raw_ttl, datetime.timedelta):
            ttl = raw_ttl.total_seconds()
        elif isinstance(raw_ttl, (int, float)) and not isinstance(raw_ttl, bool):
            ttl = float(raw_ttl)
        else:
            raise _fail(
                task_name,
                "unique_ttl",
                raw_ttl,
                "must be a number of seconds or a timedelta",
                "pass e.g. unique_ttl=300 or unique_ttl=timedelta(minutes=5)",
            )
        if not math.isfinite(ttl) or round(ttl * 1000) < 1:
            raise _fail(
                task_name,
                "unique_ttl",
                raw_ttl,
                "must be positive (at least 1 ms) and finite",
                "pass a TTL > 0, e.g. unique_ttl=300",
            )
        unique_ttl = ttl

    unique_window: str | None = None
    if unique:
        window = given.get("unique_window")
        if window is None:
            window = "ttl" if unique_ttl is not None else DEFAULT_UNIQUE_WINDOW
        if window not in UNIQUE_WINDOWS:
            raise _fail(
                task_name,
                "unique_window",
                window,
                f"unknown window (valid: {', '.join(map(repr, UNIQUE_WINDOWS))})",
                "use one of the valid windows",
            )
        if unique_ttl is not None and window != "ttl":
            raise _fail(
                task_name,
                "unique_window",
                window,
                "unique_ttl implies the 'ttl' window",
                "drop unique_window or set unique_window='ttl'",
            )
        if window == "ttl" and unique_ttl is None:
            raise _fail(
                task_name,
                "unique_window",
                window,
                "the 'ttl' window needs unique_ttl",
                "add unique_ttl=<seconds>",
            )
        unique_window = str(window)

    on_duplicate = given.get("unique_on_duplicate", "return")
    if on_duplicate not in UNIQUE_ON_DUPLICATE:
        raise _fail(
            task_name,
            "unique_on_duplicate",
            on_duplicate,
            f"must be one of {', '.join(map(repr, UNIQUE_ON_DUPLICATE))}",
            "use 'return' (default) or 'raise'",
        )

    # -- concurrency / max_deliveries -----------------------------------------------------
    concurrency: int | None = None
    if "concurrency" in given:
        concurrency = _positive_int(
            task_name, "concurrency", given["concurrency"], "pass e.g. concurrency=1"
        )
    concurrency_key: str | None = None
    if "concurrency_key" in given:
        raw_key = given["concurrency_key"]
        if concurrency is None:
            raise _fail(
                task_name,
                "concurrency_key",
                raw_key,
                "requires concurrency",
                "add concurrency=<limit per key value>",
            )
        concurrency_key = checker.check("concurrency_key", raw_key, raw_key)
    max_deliveries: int | None = None
    if "max_deliveries" in given:
        max_deliveries = _positive_int(
            task_name, "max_deliveries", given["max_deliveries"], "pass e.g. max_deliveries=5"
        )

    rate_limit, rate_window_ms, rate_limit_key = _cluster_rate(given, options, checker,
                                                               task_name)

    uses_fields = bool(unique_by) or concurrency_key is not None or rate_limit_key is not None
    return TaskExtensions(
        unique=unique,
        unique_by=unique_by,
        unique_window=unique_window,
        unique_ttl=unique_ttl,
        unique_on_duplicate=str(on_duplicate) if unique else "return",
        concurrency=concurrency,
        concurrency_key=concurrency_key,
        max_deliveries=max_deliveries,
        rate_limit=rate_limit,
        rate_window_ms=rate_window_ms,
        rate_limit_key=rate_limit_key,
        var_keyword=checker.var_keyword if uses_fields else None,
    )


class PayloadBinder:
    """Binds call arguments to a task's signature, producing the payload mapping.

    ``bind(args, kwargs)`` applies defaults, so ``f.delay(1, b=2)`` and ``f.delay(a=1, b=2)``
    give the same mapping; ``*args`` becomes a list and ``**kwargs`` a dict.  For a bound task
    the first positional parameter (``self``) is not part of the payload.
    """

    def __init__(
        self, fun: Callable[..., object], bound: bool = False, task_name: str | None = None
    ) -> None:
        self.task_name = task_name or getattr(fun, "__qualname__", repr(fun))
        sig = _signature(fun)
        self._signature = (
            sig.replace(parameters=_user_parameters(sig, bound)) if sig is not None else None
        )

    def bind(
        self, args: Sequence[object] | None = None, kwargs: Mapping[str, object] | None = None
    ) -> dict[str, object]:
        """Return the payload for a call with ``args``/``kwargs``; TypeError if they don't fit."""
        args = tuple(args or ())
        kwargs = dict(kwargs or {})
        if self._signature is None:
            return {"args": list(args), "kwargs": kwargs}
        try:
            bound_args = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.task_name!r}: arguments do not match: {exc}") from None
        bound_args.apply_defaults()
        payload: dict[str, object] = {}
        for name, value in bound_args.arguments.items():
            kind = self._signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                payload[name] = list(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                payload[name] = dict(value)
            else:
                payload[name] = value
        return payload


def _lookup(ext: TaskExtensions, payload: Mapping[str, object], name: str) -> object:
    """Value of field ``name``: a named parameter, else an entry of ``**kwargs``, else None."""
    if not isinstance(payload, Mapping):
        return None
    if name in payload:
        return payload[name]
    extra = payload.get(ext.var_keyword) if ext.var_keyword is not None else None
    return extra.get(name) if isinstance(extra, Mapping) else None


def _not_json(task_name: str, option: str, fields: Mapping[str, object],
              exc: TypeError) -> TypeError:
    """The error for a key that cannot be built: names the task, the option and the
    argument at fault."""
    culprit = ""
    for name, value in fields.items():
        try:
            canonical_json(value)
        except TypeError:
            culprit = f" argument {name!r} ({type(value).__name__})"
            break
    culprit = culprit or " an argument"
    return TypeError(
        f"task {task_name!r}: {option} needs JSON-serialisable arguments, and{culprit} "
        f"is not ({exc}). Fix: pass JSON values (str, int, float, bool, None, lists, dicts; "
        "datetimes, UUIDs and decimals are converted), or key on other arguments "
        "(unique_by=[...] / concurrency_key=...).")


def _scope(ext: TaskExtensions, task_name: str, payload: Mapping[str, object],
           field: str | None) -> str:
    """The group scope of key ``field`` (concurrency_key, rate_limit_key): canonical JSON of
    its value, "" without a key."""
    if field is None:
        return ""
    value = {field: _lookup(ext, payload, field)}
    try:
        return concurrency_scope(value, field) or ""
    except TypeError as exc:
        option = "concurrency_key" if field == ext.concurrency_key else "rate_limit_key"
        raise _not_json(task_name, f"{option}={field!r}", value, exc) from None


def message_extensions(
    ext: TaskExtensions, task_name: str, payload: Mapping[str, object]
) -> dict[str, object]:
    """Header dict carried with each message: ``u`` (unique), ``c`` (concurrency), ``r``
    (cluster rate limit), ``md``.

    ``u`` = ``[f"{task}:{unique_key}", window, ttl_ms]`` (ttl_ms 0 unless the window is ttl),
    ``c`` = ``[f"{task}:{scope or ''}", limit]``, ``r`` = ``[f"{task}:{scope or ''}", starts,
    window_ms]``, ``md`` = max deliveries.  Empty if none apply.
    A key that cannot be built (an argument that is not JSON) raises ``TypeError`` naming
    the task, the option and the argument.
    """
    header: dict[str, object] = {}
    if ext.unique:
        option = f"unique_by={list(ext.unique_by)!r}" if ext.unique_by else "unique=True"
        fields = ({f: _lookup(ext, payload, f) for f in ext.unique_by} if ext.unique_by
                  else dict(payload))
        try:
            key = unique_key(fields, ext.unique_by) if ext.unique_by else unique_key(payload, None)
        except TypeError as exc:
            raise _not_json(task_name, option, fields, exc) from None
        ttl_ms = (
            round(ext.unique_ttl * 1000)
            if ext.unique_window == "ttl" and ext.unique_ttl is not None
            else 0
        )
        header["u"] = [f"{task_name}:{key}", ext.unique_window, ttl_ms]
    if ext.concurrency is not None:
        header["c"] = [f"{task_name}:{_scope(ext, task_name, payload, ext.concurrency_key)}",
                       ext.concurrency]
    if ext.rate_limit is not None:
        header["r"] = [f"{task_name}:{_scope(ext, task_name, payload, ext.rate_limit_key)}",
                       ext.rate_limit, ext.rate_window_ms]
    if ext.max_deliveries is not None:
        header["md"] = ext.max_deliveries
    return header
