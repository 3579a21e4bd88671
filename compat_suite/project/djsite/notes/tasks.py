"""The notes app's task: reads the row its transaction committed."""

from celery import shared_task

from djsite.notes.models import Note
from proj.effects import record


@shared_task
def publish_note(note_id: int) -> str:
    text = Note.objects.get(pk=note_id).text
    record("note", text=text)
    return text
