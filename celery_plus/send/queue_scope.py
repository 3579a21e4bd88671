"""On a Redis Cluster store, a task's guarded keys are scoped to one queue: its home queue.

A unique hold, a concurrency group and a cluster rate limit (``unique``/``unique_by``,
``concurrency``, ``rate_limit`` with ``rate_limit_scope='cluster'``) are keys of the task's
queue's slot on a cluster (docs/redis-cluster.md), and every such key is named after its task
(``options.message_extensions``). So they hold exactly as on one server as long as each task
is published to one queue only. :func:`check_queue_scope` makes that a checked rule at
publish: the queue a message goes to must be the task's *home queue* — where the app routes
the task with no per-call options (``Task.queue``, ``task_routes`` by name, else
``task_default_queue``) — or the publish raises :class:`QueueScopeError` naming the task, the
option and the fix, instead of splitting the guarantee silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery_plus.exceptions import QueueScopeError
from celery_plus.stores.redis.connect import CLUSTER_SCHEMES

#: The ``plus`` header's parts that name a task's guarded keys, and the options behind them.
GUARDED = {"u": "unique (unique_by)", "c": "concurrency",
           "r": "rate_limit_scope='cluster' (or rate_limit_key)"}


def is_cluster_store(app: Any) -> bool:
    """True when ``app``'s broker is a Redis Cluster store (``plus+redis+cluster://``)."""
    url = app.conf.broker_url
    first = url[0] if isinstance(url, list | tuple) and url else url
    return isinstance(first, str) and first.startswith(
        tuple(f"plus+{scheme}://" for scheme in CLUSTER_SCHEMES))


def _queue_name(route: Mapping[str, Any]) -> str | None:
    queue = route.get("queue")
    return getattr(queue, "name", queue)


def home_queue(app: Any, name: str, task: Any) -> str | None:
    """The queue ``task`` is routed to without per-call options (None: it depends on the
    call, e.g. a router function of the arguments)."""
    own = getattr(task, "queue", None)
    try:
        return _queue_name(app.amqp.router.route({"queue": own} if own else {}, name, (), {},
                                                 task))
    except Exception:  # a router that needs the call's arguments: no fixed home
        return None


def check_queue_scope(app: Any, name: str, task: Any, header: Mapping[str, Any],
                      options: Mapping[str, Any], args: Any, kwargs: Any) -> None:
    """Raise :class:`QueueScopeError` if a message of ``name`` carrying guarded keys
    (``header``) would go to a queue other than the task's home queue on a cluster store."""
    guarded = [option for part, option in GUARDED.items() if header.get(part)]
    if not guarded or not is_cluster_store(app):
        return
    target = _queue_name(app.amqp.router.route(dict(options), name, args or (), kwargs or {},
                                               task))
    home = home_queue(app, name, task)
    if target == home:
        return
    where = f"its home queue {home!r}" if home else "no fixed home queue"
    raise QueueScopeError(
        f"Task {name!r} uses {' and '.join(guarded)}, which a Redis Cluster store keeps per "
        f"queue, and this call sends it to queue {target!r} while it has {where}. Route the "
        f"task to one queue (its queue= option or a task_routes entry by name) and publish "
        f"it there only; or drop {guarded[0]} (docs/redis-cluster.md).")
