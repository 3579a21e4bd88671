"""Which label value a concurrency or rate-limit group gets in ``/metrics``.

A group is named ``<task>:<scope>``: the scope is empty for a task-wide limit, else the JSON of
the key's value (``concurrency_key="customer_id"``: ``proj.report:42``). Key values are the
application's data (customer ids), unbounded: by default a keyed group is labelled
``<task>:*`` and its numbers are added up over the task's keys; ``plus_admin_metrics_key_labels
= True`` labels each group by its own name. The task is the text before the first ``:``, so no
part of a key value ever reaches a label by default.
"""

from __future__ import annotations

#: The label of every keyed group of a task, when key values stay out of the labels.
ANY_KEY = "*"


def task_of(group: str) -> str:
    """The task part of a group name."""
    return group.partition(":")[0]


def is_keyed(group: str) -> bool:
    return bool(group.partition(":")[2])


def group_label(group: str, key_labels: bool) -> str:
    """The label value of ``group``: itself with ``key_labels``, else the task-wide name
    (``task:``) or ``task:*`` for a keyed group."""
    if key_labels or not is_keyed(group):
        return group
    return f"{task_of(group)}:{ANY_KEY}"
