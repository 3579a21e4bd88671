"""celery-plus: Celery with durable extensions.

Replace ``from celery import ...`` with ``from celery_plus import ...``; everything Celery
exports is here, and ``Celery``/``Task``/``shared_task`` gain the extension options
(``unique``, ``unique_by``, ``unique_window``, ``unique_ttl``, ``unique_on_duplicate``,
``concurrency``, ``concurrency_key``, ``max_deliveries``). Importing this package registers
the ``plus+<url>`` broker transport.
"""

from __future__ import annotations

# isort: off
from celery_plus import _early  # noqa: F401  (first: the celery-plus command's gevent/eventlet patching)
# isort: on

from typing import Any

from celery import (
    Signature,
    bugreport,
    chain,
    chord,
    chunks,
    current_app,
    current_task,
    group,
    maybe_signature,
    signature,
    subtask,
    uuid,
    xmap,
    xstarmap,
)
from celery import shared_task as _celery_shared_task

from celery_plus import beat as _beat  # fences another beat_scheduler's ticks (install())
from celery_plus import result_backends as _result_backends  # noqa: F401  ("plus+" result URLs)
from celery_plus import transport as _transport  # the "plus" transport alias
from celery_plus import worker as _worker  # the one entry into Celery's worker
from celery_plus.app import Celery
from celery_plus.send.options import EXTENSION_OPTIONS, parse_extensions
from celery_plus.send.transactional import enqueue_after_commit, enqueue_in
from celery_plus.task import Task, plus_task_class

__version__ = "0.1.0"


def shared_task(*args: Any, **kwargs: Any) -> Any:
    """Celery's ``shared_task``; on a ``celery_plus.Celery`` app the task derives from
    ``celery_plus.Task`` whatever its ``base=`` (and from Celery's ``DjangoTask`` under
    Django, as with plain Celery).

    Extension options are validated when the decorator is applied. A task with extension
    options is created on every app of the process, as Celery's shared tasks are; on an app
    that is not a ``celery_plus.Celery`` (a half-swapped project) sending it raises
    ``ImproperlyConfigured`` instead of ignoring its options, and the rest of that app keeps
    working (Celery creates shared tasks on unrelated apps too).
    """
    if kwargs.get("base") is not None:
        kwargs["base"] = plus_task_class(kwargs["base"])

    def create(fun: Any) -> Any:
        given = sorted(k for k in kwargs if k in EXTENSION_OPTIONS and kwargs[k] is not None)
        if not given:
            return _celery_shared_task(**kwargs)(fun)
        name = kwargs.get("name") or f"{fun.__module__}.{fun.__name__}"
        parse_extensions(fun, kwargs, bound=bool(kwargs.get("bind")), task_name=name)
        return _plus_shared_task(fun, kwargs)

    if len(args) == 1 and callable(args[0]):
        return create(args[0])
    return create


def _plus_shared_task(fun: Any, options: dict[str, Any]) -> Any:
    """Celery's ``shared_task`` for a task with extension options: created on each app as it
    finalizes (and on those already finalized), as ``celery_plus.Task`` on a plain app too."""
    from celery import _state
    from celery.local import Proxy

    if type(fun) is Proxy:
        raise TypeError("@shared_task was applied more than once to the same function. "
                        "Remove the extra @shared_task decorator.")
    name = options.get("name")

    def on(app: Any) -> Any:
        if isinstance(app, Celery):
            return app._task_from_fun(fun, **options)
        # A plain app: the task derives from celery_plus.Task there too, whose binding marks
        # it refused (``Task.plus_refused``): it raises when sent, nothing else does.
        return app._task_from_fun(fun, **{**options, "base": plus_task_class(
            options.get("base") or Task)})

    on.plus_shared_task = True  # type: ignore[attr-defined]
    _state.connect_on_app_finalize(on)
    for app in _state._get_active_apps():
        if app.finalized:
            with app._finalize_mutex:
                on(app)

    def task_by_cons() -> Any:
        app = _state.get_current_app()
        return app.tasks[name or app.gen_task_name(fun.__name__, fun.__module__)]

    return Proxy(task_by_cons)


_transport.register()
_worker.install()
_beat.install()


def __getattr__(name: str) -> Any:
    """Every other name of Celery's top level (``VERSION``, ``version_info``, and its
    submodules: ``bootsteps``, ``platforms``, ``loaders``, …), so that the swap table's
    ``from celery import …`` → ``from celery_plus import …`` holds for each; a submodule of
    celery-plus's own of that name (``beat``, ``app``, ``utils``, …) is celery-plus's."""
    import importlib
    import importlib.util

    import celery

    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    if hasattr(celery, name):
        return getattr(celery, name)
    try:
        return importlib.import_module(f"celery.{name}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

__all__ = [
    "Celery",
    "Signature",
    "Task",
    "bugreport",
    "chain",
    "chord",
    "chunks",
    "current_app",
    "current_task",
    "enqueue_after_commit",
    "enqueue_in",
    "group",
    "maybe_signature",
    "shared_task",
    "signature",
    "subtask",
    "uuid",
    "xmap",
    "xstarmap",
]
