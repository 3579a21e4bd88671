"""``celery_plus.Celery``: Celery with durable defaults and the uniqueness-aware send path.

Uniqueness is decided where every message is published (``send_task``, which ``delay``,
``apply_async``, canvas, beat and retries all reach): the task's extension header is
computed here, the durable transport decides atomically in the store, and a duplicate comes
back as the holder's ``AsyncResult`` with ``.deduplicated`` set (or ``DuplicateTask``).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import celery
import celery.app.defaults
from celery.app import backends
from celery.app.amqp import AMQP
from celery.result import AsyncResult
from kombu import pools
from kombu.resource import Resource
from kombu.utils.imports import symbol_by_name

from celery_plus import settings, signals
from celery_plus.exceptions import DuplicateTask
from celery_plus.runtime.embedded_files import worker_file_elsewhere
from celery_plus.send import follow
from celery_plus.send.argsrepr import plain_repr
from celery_plus.send.config_view import speed_up
from celery_plus.send.options import (
    EXTENSION_OPTIONS,
    check_option_names,
    message_extensions,
    parse_extensions,
)
from celery_plus.send.producer import Producer
from celery_plus.send.queue_scope import check_queue_scope
from celery_plus.task import plus_task_class
from celery_plus.transport.publishing import PublishBatch, current_batch, last_publish

logger = logging.getLogger("celery_plus")

#: Durable defaults: late acks, requeue on worker loss, failures dead-lettered (the failed
#: delivery is acked with its failure details, which the transport turns into a dead letter).
DURABLE_DEFAULTS: dict[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "task_acks_on_failure": True,
    "task_acks_on_timeout": True,
    "broker_connection_retry_on_startup": True,
    # The plus transport is synchronous, so Celery's worker runs ETA/countdown/retry tasks
    # from its threaded timer, which sleeps up to this long between checks (the event loop
    # plain Redis uses has no such delay). Such tasks arrive already due: keep it short.
    "worker_timer_precision": 0.1,
    # Beat keeps its entries, last runs and leader in the store (docs/schedules.md); on a
    # broker that is not a plus store it is Celery's PersistentScheduler.
    "beat_scheduler": "celery_plus.beat:Scheduler",
    **settings.DEFAULTS,
}


#: Folder (under the working directory) of the embedded store used when no broker is set.
EMBEDDED_DIR = ".celery-plus"


def embedded_path(main: str | None, cwd: str | os.PathLike[str] | None = None) -> Path:
    """The SQLite file an app named ``main`` uses when no broker is configured.

    ``<cwd>/.celery-plus/<main>.db`` (``default.db`` for an app without a name).
    """
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", main or "") or "default"
    base = Path(cwd) if cwd is not None else Path.cwd()
    return base.absolute() / EMBEDDED_DIR / f"{name}.db"


def embedded_url(main: str | None, cwd: str | os.PathLike[str] | None = None) -> str:
    """``plus+sqlite:///<cwd>/.celery-plus/<main>.db``: the embedded default broker URL.

    ``<cwd>`` is absolute, so the URL has four slashes (SQLAlchemy-style, as the
    ``plus+sqlite://`` transport reads it).
    """
    return f"plus+sqlite:///{embedded_path(main, cwd).as_posix()}"


#: The embedded default's warning was logged in this process (once per process).
_embedded_warned = False


def warn_embedded_default(path: Path, app_name: str = "") -> None:
    """Log, once per process, that no broker is configured and jobs go to the embedded
    SQLite file ``path`` (under this process's working directory); and, if a worker of the
    same app on this host serves another file, that these jobs will never reach it."""
    global _embedded_warned
    if _embedded_warned:
        return
    _embedded_warned = True
    elsewhere = worker_file_elsewhere(app_name, path)
    if elsewhere is not None:
        logger.warning(
            "celery-plus: a worker of app %r on this host serves the embedded file %s while "
            "this process uses %s (neither has a broker configured): jobs published here never "
            "reach it. Start both from the same directory, or set broker_url "
            "(docs/embedded.md).",
            app_name, elsewhere, path)
    logger.warning(
        "celery-plus: no broker configured: using the embedded default, the SQLite file %s "
        "(under this process's working directory; a process started elsewhere uses another "
        "file and never sees these jobs). Set broker_url (e.g. plus+redis://..., "
        "plus+postgresql://...) for anything but a single-machine setup (docs/embedded.md).",
        path)


def _validate_decorator_options(fun: Callable[..., Any], opts: dict[str, Any], app: Any) -> None:
    """Fail at decoration time, not at finalize or first call, on bad extension options
    (a misspelt one included)."""
    if not callable(fun):
        return
    name = opts.get("name") or app.gen_task_name(fun.__name__, fun.__module__)
    check_option_names(name, opts)
    if not any(k in opts for k in EXTENSION_OPTIONS):
        return
    parse_extensions(fun, opts, bound=bool(opts.get("bind")), task_name=name)


class KeepingProducerPool(pools.ProducerPool):
    """A producer pool whose producers keep their own connection between uses.

    kombu's pool hands each producer's connection back to the connection pool on release
    and re-binds a connection (copying its entities) on every acquire: about a fifth of
    ``delay()``'s own cost. Here a pooled producer owns a connection of its own (not one of
    ``app.pool``'s, which other users of that pool could then wait for), so acquiring one
    is a queue pop. Without a pool limit, producers are not kept: kombu's behaviour.
    """

    def _acquire_connection(self) -> Any:
        if not self.limit:
            return super()._acquire_connection()
        return self.connections.connection.clone()

    def release(self, resource: Any) -> None:
        if not self.limit:
            super().release(resource)
            return
        Resource.release(self, resource)


class PlusAMQP(AMQP):
    """Celery's AMQP helper with the lean producer for durable queues."""

    Producer = Producer
    _producer_pool: Any

    @property
    def producer_pool(self) -> Any:
        if self._producer_pool is None:
            self._producer_pool = KeepingProducerPool(
                self.app.pool, limit=self.app.pool.limit, Producer=Producer)
        return self._producer_pool

    publisher_pool = producer_pool

    def as_task_v2(self, task_id: str, name: str, args: Any = None, kwargs: Any = None,
                   *positional: Any, **options: Any) -> Any:
        """Celery's message, with ``argsrepr`` / ``kwargsrepr`` of plain arguments written
        by ``repr`` where it gives ``saferepr``'s text (``send/argsrepr.py``)."""
        if options.get("argsrepr") is None:
            options["argsrepr"] = plain_repr(args or (), self.argsrepr_maxsize)
        if options.get("kwargsrepr") is None:
            options["kwargsrepr"] = plain_repr(kwargs or {}, self.kwargsrepr_maxsize)
        return super().as_task_v2(task_id, name, args, kwargs, *positional, **options)

    @cached_property
    def send_task_message(self) -> Any:
        # On a non-plus broker with plus_coordination_url, messages with extension options
        # are recorded in the coordination store first; otherwise Celery's sender, unchanged.
        from celery_plus.coordination.sender import coordinated_sender

        return coordinated_sender(self.app, self._create_task_sender())


def django_dropped_keys(source: Any) -> list[str]:
    """The names a Django settings module defines that Django's settings leave out (not
    upper-case), when ``source`` (``config_from_object``'s) is Django's settings."""
    conf = sys.modules.get("django.conf")
    if conf is None or (source is not conf.settings and source != "django.conf:settings"):
        return []
    if not conf.settings.configured:
        return []
    module = sys.modules.get(conf.settings.SETTINGS_MODULE or "")
    return [name for name in vars(module) if not name.isupper()] if module else []


class Celery(celery.Celery):
    """A ``celery.Celery`` whose tasks are ``celery_plus.Task`` and whose defaults are durable.

    ``task_cls`` keeps Celery's default, so Celery's Django fix-up still picks its
    ``DjangoTask`` (``delay_on_commit``); whatever the task class or a task's ``base=``,
    ``celery_plus.Task`` is mixed in (:func:`~celery_plus.task.plus_task_class`).
    """

    amqp_cls = "celery_plus.app:PlusAMQP"

    #: The embedded default (used when no broker is configured): ``embedded_path`` is the
    #: SQLite file, ``<working directory at creation>/.celery-plus/<main>.db``.
    embedded_path: Path
    embedded_url: str
    #: The configuration's keys were checked for misspelt ``plus_*`` settings.
    _plus_spelling_checked = False

    def __init__(self, main: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(main, *args, **kwargs)
        # Embedded default: with no broker configured (argument, conf, config object or
        # CELERY_BROKER_URL) the app uses a SQLite file instead of Celery's amqp default.
        self.embedded_path = embedded_path(self.main)
        self.embedded_url = f"plus+sqlite:///{self.embedded_path.as_posix()}"
        from celery_plus.worker.bootsteps import install_bootsteps

        install_bootsteps(self)
        follow.register(self)

    # -- configuration ----------------------------------------------------------------
    def plus_config(self) -> settings.PlusConfig:
        """The validated ``plus_*`` settings (``ImproperlyConfigured`` names a bad one,
        or a misspelt one as the user wrote it)."""
        self._check_setting_names()
        return settings.resolve({k: self.conf.get(k) for k in settings.BY_NAME},
                                settings.written_names(self.conf.keys()))

    def _check_setting_names(self) -> None:
        """Fail on a ``plus_*``-like key the app would never read (misspelt, or a form not
        read), including lower-case ones a Django settings module holds (Django drops them)."""
        settings.check_spelling(self.conf.keys(), self.namespace)
        settings.check_spelling(django_dropped_keys(self._config_source), self.namespace,
                                dropped_by="Django keeps only upper-case settings.")

    def _load_config(self) -> Any:
        conf = speed_up(super()._load_config())
        self._install_durable_defaults(conf)
        return conf

    def _install_durable_defaults(self, conf: Any) -> None:
        """Put celery-plus's defaults just above Celery's own, below all the user set.

        ``add_defaults`` would rank them above a ``config_from_object`` source, and Celery
        forgets pending defaults when the configuration is reloaded; so they are written
        here, on every load, into this app's own copy of Celery's defaults (the last map).
        No extra map: every configuration read in the send path stays as cheap as in plain
        Celery. ``CELERY_BROKER_URL`` still wins (Celery reads it first).
        """
        defaults: dict[str, Any] = dict(DURABLE_DEFAULTS)
        if not any(conf.get(key) for key in ("broker_host", "broker_transport")):
            defaults["broker_url"] = self.embedded_url
        base = conf.defaults[-1]
        if base is not conf.maps[-1] or base is celery.app.defaults.DEFAULTS:
            # Not the per-app copy Celery makes: keep it untouched, rank ours above it.
            conf.maps.insert(len(conf.maps) - 1, defaults)
            conf.defaults.insert(len(conf.defaults) - 1, defaults)
            return
        base.update(defaults)

    def uses_embedded_broker(self) -> bool:
        """True if the broker is the embedded default (no broker was configured)."""
        return bool(self.conf.broker_url == self.embedded_url)

    def _get_backend(self) -> Any:
        # On the embedded broker with no result backend configured, results go to the
        # same SQLite file (``plus+sqlite:``) rather than nowhere.
        if (self.backend_cls is None and not self.conf.result_backend
                and self.uses_embedded_broker()):
            backend, url = backends.by_url(self.embedded_url, self.loader)
            return backend(app=self, url=url)
        return super()._get_backend()

    def _connection(self, url: Any, **kwargs: Any) -> Any:
        if url == self.embedded_url:
            warn_embedded_default(self.embedded_path, self.main or "")
            self.embedded_path.parent.mkdir(parents=True, exist_ok=True)
        if not self._plus_spelling_checked:
            self._check_setting_names()
            self._plus_spelling_checked = True
        options = dict(kwargs.pop("transport_options", None) or {})
        for name in settings.BY_NAME:
            options.setdefault(name, self.conf.get(name))
        return super()._connection(url, transport_options=options, **kwargs)

    # -- task declaration ---------------------------------------------------------------
    def create_task_cls(self) -> Any:
        """The app's ``Task``: ``task_cls`` (Celery's, Django's or the user's) with
        ``celery_plus.Task`` mixed in."""
        base = symbol_by_name(self.task_cls)
        return self.subclass_with_self(plus_task_class(base), name="Task", attribute="_app",
                                       keep_reduce=True, abstract=True)

    def _task_from_fun(self, fun: Any, name: Any = None, base: Any = None,
                       bind: bool = False, **options: Any) -> Any:
        if base is not None:
            base = plus_task_class(base)  # base=MyBase(celery.Task) keeps the extensions
        return super()._task_from_fun(fun, name=name, base=base, bind=bind, **options)

    def task(self, *args: Any, **opts: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not opts:
            return super().task(*args)
        decorate = super().task(*args, **opts)

        def validating(fun: Callable[..., Any]) -> Any:
            _validate_decorator_options(fun, opts, self)
            return decorate(fun)

        return validating

    # -- the send path ------------------------------------------------------------------
    def send_task(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        if not self.finalized and self.autofinalize:
            self.finalize(auto=True)  # declared tasks are registered when the app finalizes
        task = options.get("task_type") or self._tasks.get(name)
        ext = getattr(task, "plus_extensions", None)
        header: dict[str, Any] = {}
        if ext is not None:
            payload = task.plus_binder.bind(args or (), kwargs or {})
            header = message_extensions(ext, name, payload)
            check_queue_scope(self, name, task, header, options, args, kwargs)
            if header:
                options["headers"] = {**(options.get("headers") or {}), "plus": header}
        token = last_publish.set(None)
        try:
            result = super().send_task(name, args, kwargs, **options)
            outcome = last_publish.get()
        finally:
            last_publish.reset(token)
        if outcome is not None and outcome.state == "batched":
            batch = current_batch.get()
            if batch is not None:
                batch.watch(outcome.job_id, (result, name, header, ext, options))
            result.deduplicated = None
            return result
        if outcome is None or outcome.accepted:
            result.deduplicated = False
            return result
        if outcome.fenced:
            # The id names a running job this publish may not change (not its current
            # continuation): nothing was stored; the result is that job's.
            logger.info("celery-plus: publish of %s[%s] changed nothing: the job is %s and "
                        "this is not its current claim's continuation", name, result.id,
                        outcome.state or "gone")
            result.deduplicated = True
            return result
        return self._duplicate(name, result, outcome.holder_id or "", header, ext, options)

    @contextmanager
    def publish_batch(self) -> Iterator[PublishBatch]:
        """Store every durable message published inside the block in one round trip.

        ``delay``/``apply_async``/``send_task`` inside the block return at once; the jobs
        are stored together when the block ends, each still deciding its own uniqueness
        (in order). A result's ``.deduplicated`` is ``None`` until then, and afterwards
        ``True`` (its ``.id`` is now the holder's) or ``False``. A task declaring
        ``unique_on_duplicate="raise"`` raises ``DuplicateTask`` when the block ends, after
        the whole batch was stored. If the block raises, nothing in it is published.
        """
        batch = PublishBatch()
        token = current_batch.set(batch)
        try:
            yield batch
        finally:
            current_batch.reset(token)
        refusal: DuplicateTask | None = None
        for outcome in batch.flush():
            watched = batch.watched.get(outcome.job_id)
            if watched is None:
                continue
            result, name, header, ext, options = watched
            if outcome.accepted:
                result.deduplicated = False
                continue
            if outcome.fenced:
                result.deduplicated = True
                continue
            try:
                holder = self._duplicate(name, result, outcome.holder_id or "", header, ext,
                                         options)
            except DuplicateTask as exc:
                refusal = refusal or exc
                holder = type(result)(exc.holder_id, app=self)
            result.id = holder.id
            result.deduplicated = True
        if refusal is not None:
            raise refusal

    def _duplicate(self, name: str, result: AsyncResult, holder_id: str,
                   header: dict[str, Any], ext: Any, options: dict[str, Any]) -> AsyncResult:
        """A publish coalesced into ``holder_id``: the holder's result for a plain call; a
        canvas member (or a caller-chosen id) keeps its id, which follows the holder's
        outcome (``follow.py``)."""
        unique_key = header.get("u", [""])[0]
        signals.task_deduplicated.send(
            sender=name, task_id=result.id, holder_id=holder_id, unique_key=unique_key
        )
        if ext is not None and ext.unique_on_duplicate == "raise":
            raise DuplicateTask(name, holder_id, unique_key)
        if follow.needs_follower(options) and result.id != holder_id:
            super().send_task(follow.FOLLOW_TASK, (holder_id,), {},
                              **follow.follower_options(options, result.id, name))
            result.deduplicated = True
            result.holder_id = holder_id
            return result
        holder = type(result)(holder_id, app=self)
        holder.deduplicated = True
        return holder
