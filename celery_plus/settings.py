"""The ``plus_*`` settings: each declared once, with its type, default and meaning.

Celery-style lower-case names; ``config_from_object(..., namespace="CELERY")`` users write
them as ``CELERY_PLUS_...``. :func:`resolve` validates a configuration and fails with a
message that names the setting and the fix.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from celery.exceptions import ImproperlyConfigured
from celery.utils.text import match_case


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    check: Callable[[Any], bool]
    expects: str
    doc: str
    #: A secret: an invalid value is never echoed in the error message.
    secret: bool = False


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _optional_positive(value: Any) -> bool:
    return value is None or _positive(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _non_empty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and ":" not in value


#: Fewest guesses (zxcvbn's estimate, for an attacker who knows how people pick secrets) a
#: dashboard secret must need (docs/decisions.md): ``secrets.token_urlsafe(16)`` needs about
#: 1e22, a random 16-character one 1e14 or more unless it holds a word of
#: :data:`SECRET_CONTEXT_WORDS` (2 in 10,000).
MIN_SECRET_GUESSES = 1e14
#: Characters zxcvbn is given (it refuses longer input; a prefix is never easier to guess).
_ZXCVBN_MAX = 72
#: Words an attacker of a celery-plus dashboard tries first: zxcvbn's ``user_inputs``, and
#: taken out before a second estimate, so ``celery-plus-admin-token`` (zxcvbn alone counts
#: each separator as a new pattern: 1e16) or ``prod-admin-token-01`` is no secret.
SECRET_CONTEXT_WORDS = ("celery", "plus", "admin", "administrator", "dashboard", "token",
                        "secret", "password", "pass", "operator", "reader", "read",
                        "prod", "production", "staging", "stage", "test", "flower",
                        "worker")
_CONTEXT_WORD = re.compile("|".join(sorted(SECRET_CONTEXT_WORDS, key=len, reverse=True)),
                           re.IGNORECASE)


@functools.lru_cache(maxsize=16)
def secret_guesses(value: str) -> float:
    """How many guesses ``value`` needs, as zxcvbn estimates it (patterns, repeats,
    sequences, keyboard walks, dictionary words), the fewer of ``value`` and of ``value``
    without :data:`SECRET_CONTEXT_WORDS`."""
    from zxcvbn import zxcvbn

    return min(float(zxcvbn(text[:_ZXCVBN_MAX], user_inputs=SECRET_CONTEXT_WORDS)["guesses"])
               for text in (value, _CONTEXT_WORD.sub("", value)))


def _admin_token(value: Any) -> bool:
    """None, or a secret of at least 16 printable characters, no space, that needs at least
    :data:`MIN_SECRET_GUESSES` guesses (``password12345678`` or ``0123456789abcdef`` is no
    secret)."""
    return value is None or (isinstance(value, str) and len(value) >= 16
                             and value.isprintable() and not any(c.isspace() for c in value)
                             and secret_guesses(value) >= MIN_SECRET_GUESSES)


def _host_names(value: Any) -> bool:
    """None, or a list of host names (``"*"``: any; ``".example.com"``: it and subdomains)."""
    if value is None:
        return True
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        return False
    return all(isinstance(name, str) and re.fullmatch(r"\*|\.?[A-Za-z0-9_.:\[\]-]+", name)
               is not None for name in value)


#: URL schemes a coordination store may use (``plus_coordination_url``).
COORDINATION_SCHEMES = ("redis", "rediss", "postgresql", "postgres")


def _coordination_url(value: Any) -> bool:
    return value is None or (isinstance(value, str)
                             and value.partition("://")[0] in COORDINATION_SCHEMES
                             and "://" in value)
def _queue_names(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        return False
    return all(isinstance(name, str) and name and not name.endswith(".pidbox")
               and not name.startswith("celeryev") for name in value)


def _redis_url(value: Any) -> bool:
    return value is None or (isinstance(value, str)
                             and value.partition("://")[0] in ("redis", "rediss"))


#: PostgreSQL's own values of ``synchronous_commit``.
PG_SYNCHRONOUS_COMMIT = ("on", "off", "local", "remote_write", "remote_apply")


def _pg_schema(value: Any) -> bool:
    return (isinstance(value, str) and re.fullmatch(r"[a-z_][a-z0-9_]{0,47}", value) is not None
            and not value.startswith("pg_"))


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "plus_visibility_timeout",
        30.0,
        _positive,
        "seconds > 0",
        "Lease length of a claim; a claim not renewed for this long is recovered.",
    ),
    Setting(
        "plus_heartbeat_interval",
        None,
        _optional_positive,
        "seconds > 0 or None",
        "How often a worker renews its leases (default: a third of the visibility timeout).",
    ),
    Setting(
        "plus_max_deliveries",
        5,
        _positive_int,
        "an integer >= 1",
        "Deliveries without a settle (worker lost, lease expired) before a dead letter.",
    ),
    Setting(
        "plus_completed_retention",
        86400.0,
        _positive,
        "seconds > 0",
        "How long completed job records are kept.",
    ),
    Setting(
        "plus_completed_max",
        100_000,
        _positive_int,
        "an integer >= 1",
        "At most this many completed records are kept (oldest pruned first).",
    ),
    Setting(
        "plus_dead_letter_retention",
        7 * 86400.0,
        _positive,
        "seconds > 0",
        "How long dead-lettered (failed) records are kept.",
    ),
    Setting(
        "plus_dead_letter_max",
        100_000,
        _positive_int,
        "an integer >= 1",
        "At most this many dead letters are kept (oldest pruned first).",
    ),
    Setting(
        "plus_maintenance_interval",
        1.0,
        _positive,
        "seconds > 0",
        "How often (cluster-wide) expired leases are recovered and records pruned.",
    ),
    Setting(
        "plus_beat_lease",
        10.0,
        _positive,
        "seconds > 0",
        "Beat's leader lease: the store holds the role for half of this from each renewal, the "
        "leader renews it and the others try for it every sixth of it, so when it dies another "
        "fires within two thirds of this (docs/schedules.md).",
    ),
    Setting(
        "plus_beat_catch_up",
        "once",
        lambda value: value in ("once", "skip"),
        "'once' or 'skip'",
        "Ticks missed by more than plus_beat_catch_up_window (every beat process was down): "
        "'once' runs the entry once for all of them, 'skip' runs none.",
    ),
    Setting(
        "plus_beat_catch_up_window",
        60.0,
        _positive,
        "seconds > 0",
        "A tick overdue by at most this (a leader failover, a slow loop) is still run, each "
        "tick once; older ones are missed ticks (plus_beat_catch_up).",
    ),
    Setting(
        "plus_rate_limit_margin",
        0.1,
        lambda value: isinstance(value, (int, float)) and not isinstance(value, bool)
        and 0 <= value <= 60,
        "seconds from 0 to 60",
        "A cluster rate limit's window is kept this much longer in the store, so the limit "
        "holds for the tasks' starts (a little after their claims) too (docs/rate-limits.md).",
    ),
    Setting(
        "plus_poll_interval",
        1.0,
        _positive,
        "seconds > 0",
        "Longest idle wait of a consumer before it looks for due jobs again.",
    ),
    Setting(
        "plus_unique_backstop",
        86400.0,
        _positive,
        "seconds > 0",
        "How long a pending/running unique hold outlives its job's need of it: taken until "
        "the due time plus this, renewed while the job waits or runs (a lost record never "
        "locks a key for longer).",
    ),
    Setting(
        "plus_key_prefix",
        "plus",
        _non_empty_str,
        "a non-empty string without ':'",
        "Prefix of every key the Redis backend writes (isolates deployments on one server).",
    ),
    Setting(
        "plus_redis_compact_records",
        True,
        lambda value: isinstance(value, bool),
        "True or False",
        "Redis: store each job's envelope in its own key next to a small hash (less memory "
        "per waiting job than the envelope in the hash). Workers of releases before the compact "
        "layout read the envelope only from the hash: set it to False while any of them still runs "
        "(a rolling upgrade), and back once every worker runs this release or a later one "
        "(docs/redis-transport.md).",
    ),
    Setting(
        "plus_redis_deflate",
        True,
        lambda value: isinstance(value, bool),
        "True or False",
        "Redis, compact layout: deflate each envelope against a fixed dictionary before storing "
        "it (791 instead of 1,541 bytes per waiting job, for 7-14 µs of the publisher's CPU per "
        "job; docs/benchmarks.md). On by default (issue #17's memory bound); False stores it as "
        "published. Every release since the compact layout reads both forms.",
    ),
    Setting(
        "plus_redis_allow_eviction",
        False,
        lambda value: isinstance(value, bool),
        "True or False",
        "Redis: connect to a server whose maxmemory-policy may evict keys (allkeys-*, "
        "volatile-*). By default such a store is refused at start-up, since a full server "
        "would delete jobs; True runs anyway, accepting that loss (docs/reliability.md).",
    ),
    Setting(
        "plus_redis_wait_replicas",
        0,
        lambda value: isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "an integer >= 0",
        "Redis Cluster (plus+redis+cluster://): a publish is acknowledged only once this many "
        "replicas of its queue's primary have it (WAIT after the publish, on its connection); "
        "0 acknowledges on the primary's write alone; above 0 on another Redis store is an "
        "error (docs/redis-cluster.md).",
    ),
    Setting(
        "plus_redis_wait_timeout",
        1.0,
        _positive,
        "seconds > 0",
        "Longest wait for plus_redis_wait_replicas replicas; a publish they did not confirm "
        "in time raises (it may or may not survive a failover).",
    ),
    Setting(
        "plus_pg_schema",
        "celery_plus",
        _pg_schema,
        "a lower-case SQL identifier (letters, digits, '_'; at most 48 characters, "
        "not starting with a digit nor 'pg_')",
        "PostgreSQL schema of the plus+postgresql:// store (isolates deployments on one "
        "database); created and migrated on first use.",
    ),
    Setting(
        "plus_pg_synchronous_commit",
        None,
        lambda value: value is None or value in PG_SYNCHRONOUS_COMMIT,
        "None or one of " + ", ".join(repr(v) for v in PG_SYNCHRONOUS_COMMIT),
        "PostgreSQL's synchronous_commit for the store's own transactions (publishes, claims, "
        "acks); None keeps the server's. 'off' returns before the commit reaches the disk: "
        "faster publishes, but a PostgreSQL crash may lose the last moments of acknowledged "
        "publishes and acks (docs/postgres.md).",
    ),
    Setting(
        "plus_pg_connect_timeout",
        5.0,
        _positive,
        "seconds > 0",
        "PostgreSQL: the longest a new store connection may take to be set up (libpq's "
        "connect_timeout, whole seconds, at least 1; docs/reliability.md).",
    ),
    Setting(
        "plus_pg_dead_link_timeout",
        15.0,
        lambda value: _positive(value) and value >= 3,
        "seconds >= 3",
        "PostgreSQL: a store connection whose link is dead is failed by the kernel within "
        "this: TCP keepalives (first probe after a third of it idle) and libpq's "
        "tcp_user_timeout (data unacknowledged for this long) (docs/reliability.md).",
    ),
    Setting(
        "plus_pg_reply_timeout",
        None,
        _optional_positive,
        "seconds > 0 or None",
        "PostgreSQL: the longest a store call waits for the server's reply to a statement; "
        "the connection is then closed and the call fails as a lost connection (a stalled "
        "link the kernel still thinks alive). None (the default): no bound; opt in knowing "
        "that a statement whose reply was lost may have committed, and the call is tried "
        "again (docs/reliability.md). Less than half of plus_visibility_timeout.",
    ),
    Setting(
        "plus_coordination_url",
        None,
        _coordination_url,
        "None or a redis://, rediss:// or postgresql:// URL (without 'plus+')",
        "Coordination store of an app whose broker is not plus+... (amqp://, redis://): "
        "uniqueness, concurrency slots and dead letters are kept there (docs/coordination.md).",
    ),
    Setting(
        "plus_coordination_retry_delay",
        0.5,
        _positive,
        "seconds > 0",
        "Coordination store only: how long a delivery whose concurrency group is full waits "
        "(back on the broker) before it is tried again.",
    ),
    Setting(
        "plus_admin_token",
        None,
        _admin_token,
        "None or a random secret of at least 16 printable characters without spaces, not "
        "guessable in 1e14 tries (no words, sequences, repeats or keyboard walks): make one "
        "with python -c \"import secrets; print(secrets.token_urlsafe(32))\"",
        "Secret of the web dashboard's operators (HTTP Basic auth password or "
        "'Authorization: Bearer <token>'): needed to read its pages and for retry, discard, "
        "cancel and worker control; without it the dashboard is read-only and open.",
        secret=True,
    ),
    Setting(
        "plus_admin_read_token",
        None,
        _admin_token,
        "None or a random secret of at least 16 printable characters without spaces, not "
        "guessable in 1e14 tries, other than plus_admin_token: make one with python -c "
        "\"import secrets; print(secrets.token_urlsafe(32))\"",
        "Read-only secret of the web dashboard (pages, JSON, /metrics; no actions), e.g. for "
        "Prometheus or on-call viewers.",
        secret=True,
    ),
    Setting(
        "plus_admin_public_read",
        False,
        lambda value: isinstance(value, bool),
        "True or False",
        "Let the dashboard's pages be read without credentials even when a token is set "
        "(the site it is mounted in, or a proxy, authenticates readers); actions still need "
        "plus_admin_token.",
    ),
    Setting(
        "plus_admin_metrics_key_labels",
        False,
        lambda value: isinstance(value, bool),
        "True or False",
        "Let /metrics label concurrency and rate-limit groups by their key values (e.g. "
        "customer ids: one series per value, unbounded); False: one series per task, the "
        "keyed groups added up.",
    ),
    Setting(
        "plus_admin_allowed_hosts",
        None,
        _host_names,
        "None or a list of host names ('*': any; '.example.com': it and its subdomains)",
        "Host names the web dashboard answers to (the HTTP Host header), against DNS "
        "rebinding (None: localhost, 127.0.0.1, ::1 and the address `celery-plus admin` "
        "binds).",
    ),
    Setting(
        "plus_durable_queues",
        None,
        _queue_names,
        "None or a list of task queue names (remote-control and event queues are never "
        "durable)",
        "Mixed deployment: only these queues are durable; every other task queue stays in "
        "kombu's Redis layout, served by plain Celery workers (None: every queue durable).",
    ),
    Setting(
        "plus_legacy_url",
        None,
        _redis_url,
        "None or a redis:// or rediss:// URL",
        "Mixed deployment: the Redis server holding the queues not in plus_durable_queues "
        "(default: the plus+redis:// server itself; required on plus+sqlite:// and "
        "plus+postgresql://).",
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


@dataclass(frozen=True)
class PlusConfig:
    """Validated durable-transport settings, as the transport and worker use them."""

    visibility_timeout: float
    heartbeat_interval: float
    max_deliveries: int
    completed_retention: float
    completed_max: int
    dead_letter_retention: float
    dead_letter_max: int
    maintenance_interval: float
    poll_interval: float
    unique_backstop: float
    key_prefix: str
    pg_schema: str = "celery_plus"
    pg_synchronous_commit: str | None = None
    pg_connect_timeout: float = 5.0
    pg_dead_link_timeout: float = 15.0
    pg_reply_timeout: float | None = None
    redis_compact_records: bool = True
    redis_deflate: bool = True
    redis_allow_eviction: bool = False
    redis_wait_replicas: int = 0
    redis_wait_timeout: float = 1.0
    admin_token: str | None = None
    admin_read_token: str | None = None
    admin_public_read: bool = False
    admin_metrics_key_labels: bool = False
    #: Host names the dashboard answers to (None: the loopback names).
    admin_allowed_hosts: tuple[str, ...] | None = None
    coordination_url: str | None = None
    coordination_retry_delay: float = 0.5
    #: Mixed deployment: the durable queues (None: every task queue is durable).
    durable_queues: frozenset[str] | None = None
    legacy_url: str | None = None
    beat_lease: float = 10.0
    beat_catch_up: str = "once"
    beat_catch_up_window: float = 60.0
    rate_limit_margin: float = 0.1


def _plus_part(key: str) -> str | None:
    """The ``plus_...`` part of a key spelt ``plus_x``, ``PLUS_X`` or ``<NS>_PLUS_X``."""
    match = re.fullmatch(r"(?:[A-Za-z0-9]+_)?((?:plus|PLUS)_\w+)", key)
    return match[1] if match else None


def _namespaced(name: str, namespace: str) -> str:
    """``name`` as Celery reads it through ``namespace`` (``CELERY`` -> ``CELERY_PLUS_X``)."""
    return match_case(f"{namespace}_{name}", namespace)


#: The prefix the docs give for the upper-case form (``config_from_object(..., namespace=...)``).
DOCUMENTED_NAMESPACE = "CELERY"


def unknown_settings(keys: Iterable[str], namespace: str | None = None,
                     readable: bool = True) -> list[str]:
    """Keys that look like ``plus_*`` settings but that the app never reads.

    The app reads ``plus_x``, and ``<NS>_PLUS_X`` only with ``namespace=NS`` (Celery's rule:
    upper-case keys need the namespace). Anything else spelt ``plus_x``, ``PLUS_X``,
    ``CELERY_PLUS_X`` or ``<NS>_PLUS_X`` is a misspelt name or a form never read; keys of
    other prefixes (a Django project's own ``MYAPP_PLUS_...``) are someone else's.
    ``readable=False``: the keys never reached the app, so none of them is read.
    """
    read = set(BY_NAME) | ({_namespaced(n, namespace) for n in BY_NAME} if namespace else set())
    ours = {DOCUMENTED_NAMESPACE.lower(), (namespace or DOCUMENTED_NAMESPACE).lower()}
    found = []
    for key in keys:
        if not isinstance(key, str) or (readable and key in read):
            continue
        part = _plus_part(key)
        if part is None:
            continue
        prefix = key[: len(key) - len(part)].rstrip("_")
        if not prefix or prefix.lower() in ours:
            found.append(key)
    return found


def check_spelling(keys: Iterable[str], namespace: str | None = None,
                   dropped_by: str = "") -> None:
    """Fail on the first key :func:`unknown_settings` finds, naming it and the key to write
    instead: the closest setting, in the form this app reads, in the style written.

    ``dropped_by``: why these keys never reached the app (Django keeps only upper-case
    settings); the fix is then the upper-case form.
    """
    for key in unknown_settings(keys, namespace, readable=not dropped_by):
        part = (_plus_part(key) or key).lower()
        close = [part] if part in BY_NAME else difflib.get_close_matches(part, BY_NAME, n=1,
                                                                          cutoff=0.6)
        reason = f" {dropped_by}" if dropped_by else ""
        if not close:
            raise ImproperlyConfigured(
                f"Unknown celery-plus setting {key!r}.{reason} celery-plus settings are: "
                f"{', '.join(sorted(BY_NAME))}.")
        upper = bool(dropped_by) or key != part  # upper-case or prefixed
        fix, how = close[0], ""
        if upper and (namespace or dropped_by):
            fix = _namespaced(close[0], namespace or DOCUMENTED_NAMESPACE)
        if upper and not namespace:
            how = (f" (upper-case keys are read only through config_from_object(..., "
                   f"namespace={DOCUMENTED_NAMESPACE!r}), as Celery reads its own)")
        if part in BY_NAME:
            raise ImproperlyConfigured(
                f"celery-plus never reads the setting {key!r}.{reason} Write {fix!r}{how}.")
        raise ImproperlyConfigured(
            f"Unknown celery-plus setting {key!r}.{reason} Did you mean {fix!r}{how}?")


def written_names(keys: Iterable[str]) -> dict[str, str]:
    """Setting name -> the key a configuration spells it with (``CELERY_PLUS_ADMIN_TOKEN``),
    for the keys that are settings."""
    found = {}
    for key in keys:
        part = _plus_part(key) if isinstance(key, str) else None
        if part is not None and part.lower() in BY_NAME:
            found[part.lower()] = key
    return found


def resolve(values: Mapping[str, Any], written: Mapping[str, str] | None = None) -> PlusConfig:
    """Validate ``plus_*`` values (missing ones take their defaults); an error names a
    setting as ``written`` spells it (:func:`written_names`)."""
    merged: dict[str, Any] = dict(DEFAULTS)
    check_spelling(values)
    for name, value in values.items():
        if name in BY_NAME:
            merged[name] = value
    for setting in SETTINGS:
        value = merged[setting.name]
        if not setting.check(value):
            shown = (f"<hidden: {type(value).__name__} of {len(value)} characters>"
                     if setting.secret and isinstance(value, str)
                     else f"<hidden: {type(value).__name__}>" if setting.secret else repr(value))
            raise ImproperlyConfigured(
                f"Setting {(written or {}).get(setting.name, setting.name)}={shown} is "
                f"invalid: expected {setting.expects}. "
                f"{setting.doc} Fix it in your Celery configuration "
                f"(default: {setting.default!r})."
            )
    vt = float(merged["plus_visibility_timeout"])
    hb = merged["plus_heartbeat_interval"]
    heartbeat = float(hb) if hb is not None else vt / 3.0
    if heartbeat >= vt:
        raise ImproperlyConfigured(
            f"Setting plus_heartbeat_interval={heartbeat!r} must be shorter than "
            f"plus_visibility_timeout={vt!r} (a third of it is a good value), "
            "or leases expire between renewals."
        )
    reply = _optional_float(merged["plus_pg_reply_timeout"])
    if reply is not None and reply * 2 >= vt:
        raise ImproperlyConfigured(
            f"Setting plus_pg_reply_timeout={reply!r} must be less than half of "
            f"plus_visibility_timeout={vt!r}: the lease keeper may wait one reply bound on "
            "its maintenance call and one on its heartbeat, and the lease would lapse "
            "meanwhile. Lower plus_pg_reply_timeout (a quarter of the lease is a good value).")
    if merged["plus_admin_read_token"] is not None and (
            merged["plus_admin_read_token"] == merged["plus_admin_token"]):
        raise ImproperlyConfigured(
            "Setting plus_admin_read_token is the same secret as plus_admin_token: a reader "
            "would be an operator. Give it a secret of its own (secrets.token_urlsafe(32)).")
    hosts = merged["plus_admin_allowed_hosts"]
    durable = merged["plus_durable_queues"]
    if merged["plus_legacy_url"] is not None and durable is None:
        raise ImproperlyConfigured(
            "Setting plus_legacy_url is set but plus_durable_queues is None (every queue is "
            "durable, so no queue uses it). List the durable queues in plus_durable_queues "
            "(e.g. []) or remove plus_legacy_url."
        )
    return PlusConfig(
        visibility_timeout=vt,
        heartbeat_interval=heartbeat,
        max_deliveries=int(merged["plus_max_deliveries"]),
        completed_retention=float(merged["plus_completed_retention"]),
        completed_max=int(merged["plus_completed_max"]),
        dead_letter_retention=float(merged["plus_dead_letter_retention"]),
        dead_letter_max=int(merged["plus_dead_letter_max"]),
        maintenance_interval=float(merged["plus_maintenance_interval"]),
        poll_interval=float(merged["plus_poll_interval"]),
        unique_backstop=float(merged["plus_unique_backstop"]),
        key_prefix=str(merged["plus_key_prefix"]),
        pg_schema=str(merged["plus_pg_schema"]),
        pg_synchronous_commit=merged["plus_pg_synchronous_commit"],
        pg_connect_timeout=float(merged["plus_pg_connect_timeout"]),
        pg_dead_link_timeout=float(merged["plus_pg_dead_link_timeout"]),
        pg_reply_timeout=_optional_float(merged["plus_pg_reply_timeout"]),
        redis_compact_records=merged["plus_redis_compact_records"],
        redis_deflate=merged["plus_redis_deflate"],
        redis_allow_eviction=merged["plus_redis_allow_eviction"],
        redis_wait_replicas=int(merged["plus_redis_wait_replicas"]),
        redis_wait_timeout=float(merged["plus_redis_wait_timeout"]),
        admin_token=merged["plus_admin_token"],
        admin_read_token=merged["plus_admin_read_token"],
        admin_public_read=merged["plus_admin_public_read"],
        admin_metrics_key_labels=merged["plus_admin_metrics_key_labels"],
        admin_allowed_hosts=None if hosts is None else tuple(hosts),
        coordination_url=merged["plus_coordination_url"],
        coordination_retry_delay=float(merged["plus_coordination_retry_delay"]),
        durable_queues=None if durable is None else frozenset(durable),
        legacy_url=merged["plus_legacy_url"],
        beat_lease=float(merged["plus_beat_lease"]),
        beat_catch_up=str(merged["plus_beat_catch_up"]),
        beat_catch_up_window=float(merged["plus_beat_catch_up_window"]),
        rate_limit_margin=float(merged["plus_rate_limit_margin"]),
    )
