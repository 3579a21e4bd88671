"""Tasks of the notes app: ``@shared_task`` with a celery-plus option."""

from django.conf import settings

from celery_plus import shared_task
from tests.deploy.e2e.proj import record

from .models import Note


@shared_task(name="notes.mark_seen", unique_by=["note_id"])
def mark_seen(note_id: int) -> str:
    """Runs after the transaction that created the note committed: the row is there."""
    note = Note.objects.get(pk=note_id)
    note.seen_by_worker = True
    note.save(update_fields=["seen_by_worker"])
    record(settings.PREFIX, "seen", text=note.text)
    return note.text
