"""``celery_plus.Celery``: Celery with durable defaults and the uniqueness-aware send path.

Uniqueness is decided where every message is published (``send_task``, which ``delay``,
``apply_async``, canvas, beat and retries all reach): the task's extension header is
computed here, the durable transport decides atomically in the store, and a duplicate comes
back as the holder's ``AsyncResult`` with ``.deduplicated`` set (or ``DuplicateTask``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celery
from celery.app.amqp import AMQP
from celery.result import AsyncResult
from kombu import pools

from . import settings, signals
from .exceptions import DuplicateTask
from .options import EXTENSION_OPTIONS, message_extensions, parse_extensions
from .producer import Producer
from .transport.channel import last_publish

#: Durable defaults: late acks, requeue on worker loss, failures dead-lettered (the failed
#: delivery is acked with its failure details, which the transport turns into a dead letter).
DURABLE_DEFAULTS: dict[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "task_acks_on_failure": True,
    "task_acks_on_timeout": True,
    "broker_connection_retry_on_startup": True,
    **settings.DEFAULTS,
}


def _validate_decorator_options(fun: Callable[..., Any], opts: dict[str, Any], app: Any) -> None:
    """Fail at decoration time, not at finalize or first call, on bad extension options."""
    if not callable(fun) or not any(k in opts for k in EXTENSION_OPTIONS):
        return
    name = opts.get("name") or app.gen_task_name(fun.__name__, fun.__module__)
    parse_extensions(fun, opts, bound=bool(opts.get("bind")), task_name=name)


class PlusAMQP(AMQP):
    """Celery's AMQP helper with the lean producer for durable queues."""

    Producer = Producer
    _producer_pool: Any

    @property
    def producer_pool(self) -> Any:
        if self._producer_pool is None:
            self._producer_pool = pools.ProducerPool(
                self.app.pool, limit=self.app.pool.limit, Producer=Producer)
        return self._producer_pool

    publisher_pool = producer_pool


class Celery(celery.Celery):
    """A ``celery.Celery`` whose tasks are ``celery_plus.Task`` and whose defaults are durable."""

    task_cls = "celery_plus.task:Task"
    amqp_cls = "celery_plus.app:PlusAMQP"

    def __init__(self, main: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(main, *args, **kwargs)
        self.add_defaults(DURABLE_DEFAULTS)
        from .worker import install_bootsteps

        install_bootsteps(self)

    # -- configuration ----------------------------------------------------------------
    def plus_config(self) -> settings.PlusConfig:
        """The validated ``plus_*`` settings (``ImproperlyConfigured`` names a bad one)."""
        return settings.resolve({k: self.conf.get(k) for k in settings.BY_NAME})

    def _connection(self, url: Any, **kwargs: Any) -> Any:
        options = dict(kwargs.pop("transport_options", None) or {})
        for name in settings.BY_NAME:
            options.setdefault(name, self.conf.get(name))
        return super()._connection(url, transport_options=options, **kwargs)

    # -- task declaration ---------------------------------------------------------------
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
        task = options.get("task_type") or self._tasks.get(name)
        ext = getattr(task, "plus_extensions", None)
        header: dict[str, Any] = {}
        if ext is not None:
            payload = task.plus_binder.bind(args or (), kwargs or {})
            header = message_extensions(ext, name, payload)
            if header:
                options["headers"] = {**(options.get("headers") or {}), "plus": header}
        token = last_publish.set(None)
        try:
            result = super().send_task(name, args, kwargs, **options)
            outcome = last_publish.get()
        finally:
            last_publish.reset(token)
        if outcome is None or outcome.accepted:
            result.deduplicated = False
            return result
        return self._duplicate(name, result, outcome.holder_id or "", header, ext)

    def _duplicate(self, name: str, result: AsyncResult, holder_id: str,
                   header: dict[str, Any], ext: Any) -> AsyncResult:
        unique_key = header.get("u", [""])[0]
        signals.task_deduplicated.send(
            sender=name, task_id=result.id, holder_id=holder_id, unique_key=unique_key
        )
        if ext is not None and ext.unique_on_duplicate == "raise":
            raise DuplicateTask(name, holder_id, unique_key)
        holder = type(result)(holder_id, app=self)
        holder.deduplicated = True
        return holder
