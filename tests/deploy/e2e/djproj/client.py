"""The web side of the Django project: ``python -m tests.deploy.e2e.djproj.client SCENARIO``.

Prints one JSON object: what the scenario observed. Run in its own process, so the test
process never configures Django.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.deploy.e2e.djproj.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402

from tests.deploy.e2e.djproj.celery import app  # noqa: E402
from tests.deploy.e2e.djproj.notes.models import Note  # noqa: E402
from tests.deploy.e2e.djproj.notes.tasks import mark_seen  # noqa: E402


def queue_size() -> int:
    with app.connection_for_write() as conn:
        return int(conn.default_channel._size("celery"))


def on_commit() -> dict[str, object]:
    call_command("migrate", run_syncdb=True, verbosity=0)
    task = app.tasks["notes.mark_seen"]
    task_mro = [f"{c.__module__}.{c.__qualname__}" for c in type(task).__mro__]
    with transaction.atomic():
        note = Note.objects.create(text="committed")
        mark_seen.delay_on_commit(note.pk)
        mark_seen.apply_async_on_commit((note.pk,))  # the same key: coalesces once published
        queued_inside = queue_size()
    queued_after_commit = queue_size()
    try:
        with transaction.atomic():
            rolled = Note.objects.create(text="rolled back")
            mark_seen.delay_on_commit(rolled.pk)
            raise RuntimeError("rollback")
    except RuntimeError:
        pass
    return {"task_mro": task_mro, "queued_inside": queued_inside,
            "queued_after_commit": queued_after_commit, "note_id": note.pk,
            "queued_after_rollback": queue_size()}


def seen(note_id: int) -> dict[str, object]:
    return {"seen": Note.objects.get(pk=note_id).seen_by_worker}


if __name__ == "__main__":
    if sys.argv[1] == "on_commit":
        print(json.dumps(on_commit()))
    else:
        print(json.dumps(seen(int(sys.argv[2]))))
