"""The celery-plus ``Task`` base class and its worker-side ``Request``.

``Task`` validates the extension options when the task class is created and keeps the
resolved options and argument binder for the send path; a delivery whose lease was lost
before it starts does not start (``before_start``). ``Request`` records why a delivery
failed (exception type, message, traceback) so its ack dead-letters it with those details.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import celery
from billiard.einfo import ExceptionWithTraceback
from celery.exceptions import (
    Ignore,
    ImproperlyConfigured,
    Reject,
    Retry,
    Terminated,
    TimeLimitExceeded,
    WorkerLostError,
)
from celery.utils.functional import maybe_evaluate
from celery.worker.request import Request as CeleryRequest

from celery_plus.coordination.start_check import claim_lost, coordinated_claim
from celery_plus.leases.deadline import run_starts
from celery_plus.leases.keeper import clock
from celery_plus.leases.start_check import (
    LeaseUnknown,
    lease_lost_before_start,
    note_rate_start,
)
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.details import exception_text
from celery_plus.send.options import (
    EXTENSION_OPTIONS,
    PayloadBinder,
    TaskExtensions,
    check_option_names,
    parse_extensions,
)
from celery_plus.send.unpublished_retry import REASON as RETRY_NOT_PUBLISHED
from celery_plus.send.unpublished_retry import RetryNotPublished, give_back_unpublished
from celery_plus.transport.channel import QoS
from celery_plus.worker.thaw_guard import store_call

if TYPE_CHECKING:
    from celery_plus.coordination.gate import Claimed

logger = logging.getLogger("celery_plus")


def _run_function(cls: type) -> tuple[Callable[..., Any], bool]:
    """The user function behind a task class and whether it takes ``self``."""
    run = cls.__dict__.get("run")
    if isinstance(run, staticmethod):
        return run.__func__, False
    if run is None:
        run = getattr(cls, "run")  # noqa: B009
    return run, True


def _exception_type(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class TaskMemoryError(Exception):
    """A ``MemoryError`` a task raised, as the worker handles it: a failure of that task.

    Celery's ``Request.on_failure`` raises a task's ``MemoryError`` again in the worker, which
    then exits ("Unrecoverable error"; under the threads pool the raise is lost in a pool
    thread instead and the job is never settled, its lease renewed for ever). The allocation
    that failed was the task's own (in a prefork pool process, not even in the worker's
    process): the worker goes on, and the job fails like any other (issue 11: a worker never
    exits because of what a task raised). The dead letter keeps the type ``MemoryError``.
    """


def _memory_error_as_failure(exc_info: Any) -> None:
    """Hand Celery a task's ``MemoryError`` as a :class:`TaskMemoryError`."""
    exc = exc_info.exception
    inner = exc.exc if isinstance(exc, ExceptionWithTraceback) else exc
    if not isinstance(inner, MemoryError):
        return
    replacement = TaskMemoryError(exception_text(inner))
    if isinstance(exc, ExceptionWithTraceback):
        exc.exc = replacement
    else:
        exc_info.exception = replacement


class Request(CeleryRequest):
    """Celery's request, noting failure details on the delivery before it is settled.

    In coordinated mode (a non-plus broker) the delivery's claim in the coordination store is
    settled first whenever the request acks or rejects its message.
    """

    #: The coordination store's claim of this delivery (set by ``coordination/gate.py``).
    plus_claim: Claimed | None = None

    def acknowledge(self) -> None:
        if self.plus_claim is not None and not self.acknowledged:
            self.plus_claim.end("ack")
        super().acknowledge()

    def on_accepted(self, pid: Any, time_accepted: float) -> Any:
        # Before Celery's: an early ack (acks_late=False) settles in there already.
        self._note_start(time_accepted)
        return super().on_accepted(pid, time_accepted)

    def _note_start(self, time_accepted: float) -> None:
        """Mark the delivery started (its task runs from now on: no longer "reserved"), for
        its next heartbeat or its settle to carry to the store."""
        message = self.message
        qos = getattr(getattr(message, "channel", None), "qos", None)
        ran = max(time.monotonic() - float(time_accepted), 0.0)
        if isinstance(qos, QoS):
            qos.mark_started(message.delivery_tag, clock() - ran)
        elif self.plus_claim is not None:  # coordinated mode: the claim's own ledger entry
            self.plus_claim.started(clock() - ran)

    def reject(self, requeue: bool = False) -> None:
        if self.plus_claim is not None and not self.acknowledged:
            self.plus_claim.end("requeue" if requeue else "reject")
        super().reject(requeue)

    def on_failure(self, exc_info: Any, send_failed_event: bool = True,
                   return_ok: bool = False) -> Any:
        self._note_failure(exc_info.exception, exc_info.traceback)
        _memory_error_as_failure(exc_info)
        return super().on_failure(exc_info, send_failed_event, return_ok)

    def on_timeout(self, soft: bool, timeout: float) -> Any:
        if not soft:
            self._note("time limit", TimeLimitExceeded(timeout), "")
        return super().on_timeout(soft, timeout)

    def _note_failure(self, exc: BaseException, traceback: str | None) -> None:
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        if isinstance(exc, (Terminated, Retry, Ignore)):
            return
        if isinstance(exc, RetryNotPublished):
            reason = RETRY_NOT_PUBLISHED
        elif isinstance(exc, Reject):
            reason = "rejected"
        elif isinstance(exc, (WorkerLostError, SystemExit, KeyboardInterrupt)):
            reason = "worker lost"
        elif isinstance(exc, TimeLimitExceeded):
            reason = "time limit"
        else:
            reason = "task failed"
        self._note(reason, exc, traceback or "")

    def _note(self, reason: str, exc: BaseException, traceback: str) -> None:
        detail = {"reason": reason, "exc_type": _exception_type(exc),
                  "exc_message": exception_text(exc), "traceback": traceback}
        if self.plus_claim is not None:
            self.plus_claim.failure = detail
            return
        message = self.message
        qos = getattr(getattr(message, "channel", None), "qos", None)
        if isinstance(qos, QoS):
            qos.mark_failure(message.delivery_tag, detail)


class Task(celery.Task):
    """Celery's ``Task`` plus the celery-plus extension options (see ``options.py``)."""

    Request = "celery_plus.task:Request"

    unique: ClassVar[Any] = None
    unique_by: ClassVar[Any] = None
    unique_window: ClassVar[Any] = None
    unique_ttl: ClassVar[Any] = None
    unique_on_duplicate: ClassVar[Any] = None
    concurrency: ClassVar[Any] = None
    concurrency_key: ClassVar[Any] = None
    max_deliveries: ClassVar[Any] = None
    rate_limit_scope: ClassVar[Any] = None
    rate_limit_key: ClassVar[Any] = None

    #: Resolved extension options (``None`` when the task uses none).
    plus_extensions: ClassVar[TaskExtensions | None] = None
    plus_binder: ClassVar[PayloadBinder | None] = None
    #: Celery's ``rate_limit`` as given, when it is cluster-scoped (``rate_limit`` is then None).
    plus_rate_limit: ClassVar[Any] = None
    #: Set when the task was bound to an app that is no ``celery_plus.Celery`` although it
    #: has extension options: sending it raises this instead of ignoring them. (Not checked
    #: in ``__call__``: a custom ``__call__`` takes every task off Celery's fast path, which
    #: calls ``run`` directly.)
    plus_refused: ClassVar[ImproperlyConfigured | None] = None

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: str | None = None,
                    producer: Any = None, link: Any = None, link_error: Any = None,
                    shadow: str | None = None, **options: Any) -> Any:
        """Celery's ``apply_async``; under ``task_always_eager`` the extension options are
        applied as a worker would (``celery_plus/send/eager.py``). A task with extension
        options on an app that is no celery-plus app raises (``plus_refused``)."""
        if self.plus_refused is not None:
            raise self.plus_refused
        app = self._get_app()
        if not app.conf.task_always_eager:
            return super().apply_async(args, kwargs, task_id, producer, link, link_error,
                                       shadow, **options)
        from celery_plus.send import eager

        def run(eager_id: str) -> Any:
            return super(Task, self).apply_async(args, kwargs, eager_id, producer, link,
                                                 link_error, shadow, **options)

        return eager.apply_async(self, run, args, kwargs, task_id, options)

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's ``retry``; a retry whose message could not be published because the
        broker or store was unreachable gives its delivery back instead of rejecting it for
        good (``send/unpublished_retry.py``): the job runs again once the store answers."""
        try:
            return super().retry(*args, **kwargs)
        except Reject as exc:
            give_back = give_back_unpublished(exc)
            if give_back is None:
                raise
            logger.warning("celery-plus: task %s[%s]: %s; its delivery goes back to its "
                           "queue (it runs again once the store answers)", self.name,
                           self.request.id, give_back.reason)
            raise give_back from exc.reason

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        """Do not start a delivery whose lease was lost while it waited (``start_check``);
        tell the store when a cluster rate-limited task starts (its window counts starts).

        The task is ignored (Celery's ``Ignore``: no result stored, its ack a fenced no-op);
        the job runs on the worker that holds it now. A subclass overriding this handler
        calls ``super().before_start(...)`` to keep the check.
        """
        with store_call():  # a prefork pool process does not hold the task inside these
            self._check_start(task_id)
        super().before_start(task_id, args, kwargs)

    def _check_start(self, task_id: str) -> None:
        """The start check of the delivery (``Ignore``: lost; ``Reject``: the store cannot
        say) and the start of a rate-limited one noted in the store."""
        coordinated = coordinated_claim(self.request)
        if coordinated is not None:
            self._check_coordinated_claim(task_id, *coordinated)
            return
        properties = getattr(self.request, "properties", None)
        try:
            lost = isinstance(properties, dict) and lease_lost_before_start(self.app,
                                                                            properties)
        except LeaseUnknown as exc:
            logger.warning("celery-plus: task %s[%s] not started: %s; given back (it runs "
                           "once the store can say whose it is)", self.name, task_id, exc)
            raise Reject(str(exc), requeue=True) from exc
        if lost:
            logger.warning("celery-plus: task %s[%s] not started: its lease was lost while "
                           "it waited (it runs on the worker that holds it now)",
                           self.name, task_id)
            raise Ignore()
        if isinstance(properties, dict) and isinstance(properties.get("delivery_tag"), str):
            run_starts(properties["delivery_tag"])
        ext = self.plus_extensions
        if isinstance(properties, dict) and ext is not None and ext.rate_limit is not None:
            note_rate_start(self.app, properties)

    def _check_coordinated_claim(self, task_id: str, job_id: str, token: int,
                                 sure_until: float) -> None:
        """The start check of a delivery claimed in the coordination store
        (``coordination/start_check.py``): not certain and not confirmed → given back."""
        try:
            lost = claim_lost(self.app, job_id, token, sure_until)
        except LeaseUnknown as exc:
            logger.warning("celery-plus: task %s[%s] not started: %s; given back to the "
                           "broker (it runs once the coordination store can say whose it "
                           "is)", self.name, task_id, exc)
            raise Reject(str(exc), requeue=True) from exc
        if lost:
            logger.warning("celery-plus: task %s[%s] not started: its claim in the "
                           "coordination store was lost while it waited; given back to the "
                           "broker", self.name, task_id)
            raise Reject("claim lost before the start", requeue=True)
        run_starts(delivery_tag(job_id, token))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name") or f"{cls.__module__}.{cls.__qualname__}"
        check_option_names(name, cls.__dict__)
        cls._resolve_extensions(name)

    @classmethod
    def _resolve_extensions(cls, name: str) -> None:
        """Validate the extension options the class has (its own, its bases', those
        ``task_annotations`` set) and keep the resolved options and argument binder."""
        declared = {
            option: getattr(cls, option)
            for option in EXTENSION_OPTIONS
            if getattr(cls, option, None) is not None
        }
        if not declared:
            cls.plus_extensions = None
            cls.plus_binder = None
            return
        fun, bound = _run_function(cls)
        rate = cls.rate_limit if cls.rate_limit is not None else cls.plus_rate_limit
        ext = parse_extensions(fun, {**declared, "rate_limit": rate}, bound=bound,
                               task_name=name)
        if ext.rate_limit is not None:
            # Cluster-scoped: the store decides (docs/rate-limits.md); Celery's per-worker
            # bucket would limit each worker again on top.
            cls.plus_rate_limit = rate
            cls.rate_limit = None
        cls.plus_extensions = None if ext.is_empty else ext
        cls.plus_binder = PayloadBinder(fun, bound=bound, task_name=name)

    @classmethod
    def bind(cls, app: Any) -> Any:
        """Celery's ``bind`` (``from_config`` settings, ``task_annotations``), then: the
        extension options ``task_annotations`` gives are applied and validated; a task with
        extension options refuses an app that is not a ``celery_plus.Celery``; and a task
        that needs late acks gets them whatever ``acks_late`` it would have had."""
        was_bound = cls.__bound__
        given_acks_late = _acks_late_origin(cls)
        bound_app = super().bind(app)
        annotated: str | None = None
        if not was_bound and cls.name is not None and not cls.__dict__.get("abstract"):
            annotated = _apply_annotations(cls, app)
        ext = cls.plus_extensions
        if ext is not None:
            cls.plus_refused = _refusal(cls, app)
        if (ext is not None and cls.plus_refused is None and ext.needs_late_ack
                and not cls.acks_late):
            origin = annotated if annotated is not None else given_acks_late
            warnings.warn(
                f"task {cls.name!r}: acks_late=False (from {origin}) is overridden to True: "
                "concurrency slots and the 'running' uniqueness window hold until the task "
                f"finishes, which needs late acks. Fix: {_acks_late_fix(origin)}.",
                stacklevel=2,
            )
            cls.acks_late = True
        return bound_app


#: Where a task's ``acks_late=False`` came from, for the override's warning.
SETTING_ORIGIN = "the task_acks_late setting (CELERY_TASK_ACKS_LATE)"


def _acks_late_origin(cls: type) -> str:
    """Where the ``acks_late`` a task has before Celery binds it comes from: the task's own
    attribute (the decorator's argument), a base class's, or else Celery's setting."""
    for klass in cls.__mro__:
        if klass.__dict__.get("acks_late") is None:
            continue
        if klass is cls:
            return "the task's own acks_late argument"
        if klass.__module__.startswith("celery."):
            # Celery's base class, bound to a plain Celery app, copied that app's setting.
            return (f"{klass.__module__}.{klass.__qualname__}, which copied it from the "
                    "task_acks_late setting of a plain Celery app it was bound to")
        return f"its base class {klass.__module__}.{klass.__qualname__}"
    return SETTING_ORIGIN


def _acks_late_fix(origin: str) -> str:
    if origin == SETTING_ORIGIN or origin.startswith("celery."):
        return ("drop task_acks_late = False (celery-plus's default is True), or give the "
                "tasks that must ack early acks_late=False themselves")
    return f"drop acks_late=False from {origin}"


def _annotations(cls: Any, app: Any) -> list[tuple[str, dict[str, Any]]]:
    """The ``task_annotations`` Celery applies to task ``cls``, each with a label: the
    first annotation naming the task, then the first with a ``'*'`` entry (Celery's order)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for method, label in (("annotate", None), ("annotate_any", "*")):
        for annotation in app.annotations:
            annotation = maybe_evaluate(annotation)
            try:
                reply = (annotation.annotate(cls) if method == "annotate"
                         else annotation.annotate_any())
            except AttributeError:
                continue
            if reply is not None:
                where = (repr(label if label is not None else cls.name)
                         if isinstance(annotation, dict) else type(annotation).__name__)
                found.append((f"task_annotations[{where}]", dict(reply)))
                break
    return found


def _apply_annotations(cls: Any, app: Any) -> str | None:
    """Check the names ``task_annotations`` sets on task ``cls`` (a misspelt extension
    option fails) and apply the extension options among them (validated as the decorator's
    are). Returns the label of the annotation that set ``acks_late``, if one did."""
    touched = False
    acks_late: str | None = None
    for label, values in _annotations(cls, app):
        plain = {k: v for k, v in values.items() if not str(k).startswith("@")}
        check_option_names(cls.name, plain, source=label)
        touched = touched or any(k in EXTENSION_OPTIONS or k == "rate_limit" for k in plain)
        if "acks_late" in plain:
            acks_late = label
    if touched:
        try:
            cls._resolve_extensions(cls.name)
        except ImproperlyConfigured as exc:
            labels = ", ".join(label for label, _ in _annotations(cls, app))
            raise ImproperlyConfigured(f"{exc} (set in {labels})") from None
    return acks_late


def _refusal(cls: Any, app: Any) -> ImproperlyConfigured | None:
    """The error a task with extension options raises when sent on ``app``, if ``app``
    is no ``celery_plus.Celery`` (it has no ``plus_config``) and would ignore them; None on a
    celery-plus app. Not raised at binding: Celery binds shared tasks to every app of the
    process, and an unrelated plain app (Flower's, a test suite's) must keep working."""
    if callable(getattr(app, "plus_config", None)):
        return None
    return non_plus_app_error(cls.name, sorted(
        option for option in EXTENSION_OPTIONS if getattr(cls, option, None) is not None),
        app)


def non_plus_app_error(task_name: str, options: list[str], app: Any) -> ImproperlyConfigured:
    """The error for a task with extension options on an app that is no celery-plus app."""
    return ImproperlyConfigured(
        f"task {task_name!r}: {', '.join(options)} is a celery-plus option, but the task is "
        f"on the app {getattr(app, 'main', None)!r}, a {type(app).__module__}."
        f"{type(app).__qualname__} (not a celery_plus.Celery), which would ignore it. "
        "Fix: create the app with "
        "celery_plus.Celery (from celery_plus import Celery) instead of celery.Celery.")


_DEFAULT_REQUEST = (celery.Task.Request, CeleryRequest)
_mixed: dict[type, type] = {}


def _request_class(base: type[celery.Task]) -> Any:
    request = base.Request
    if isinstance(request, str):
        from kombu.utils.imports import symbol_by_name

        request = symbol_by_name(request)
    return request


def plus_task_class(base: type) -> type[Task]:
    """``base`` with the celery-plus extensions: itself if it already derives from
    :class:`Task`, else a subclass of both (``base`` first, so its overrides win).

    This is how ``@app.task(base=MyBase, unique=True)`` with ``MyBase(celery.Task)`` keeps
    the extensions (and the dead-letter details of failures), and how Celery's Django
    ``DjangoTask`` keeps ``delay_on_commit``. A ``Request`` class of ``base``'s own is
    combined with celery-plus's the same way. A base that cannot be combined fails loudly.
    """
    if not isinstance(base, type) or not issubclass(base, celery.Task):
        raise ImproperlyConfigured(
            f"task base {base!r} is not a celery.Task subclass: derive it from "
            "celery_plus.Task (or celery.Task)")
    if issubclass(base, Task):
        return base
    if base is celery.Task:
        return Task
    mixed = _mixed.get(base)
    if mixed is not None:
        return mixed
    attrs: dict[str, Any] = {"__module__": base.__module__, "__qualname__": base.__qualname__,
                             "__doc__": base.__doc__}
    request = _request_class(base)
    if request not in _DEFAULT_REQUEST and not (
            isinstance(request, type) and issubclass(request, Request)):
        attrs["Request"] = type(request.__name__, (request, Request),
                                {"__module__": request.__module__})
    try:
        mixed = type(base.__name__, (base, Task), attrs)
    except TypeError as exc:
        raise ImproperlyConfigured(
            f"task base {base.__module__}.{base.__qualname__} cannot be combined with "
            f"celery_plus.Task ({exc}): derive it from celery_plus.Task instead of "
            "celery.Task") from exc
    _mixed[base] = mixed
    return mixed
