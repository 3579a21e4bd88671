"""Django: ``delay_on_commit`` publishes when the transaction commits, never on rollback."""

from proj.effects import effects
from scenarios.support import Context, Outcome, scenario, wait_for_effects


def _published(task_name: str) -> int:
    return len(effects("signal", signal="before_task_publish", task=task_name))


@scenario(django=True)
def django_on_commit(ctx: Context) -> Outcome:
    """delay_on_commit / apply_async_on_commit wait for the commit; the worker sees the row."""
    import django
    from django.core.management import call_command
    from django.db import transaction

    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)
    from djsite.notes.models import Note
    from djsite.notes.tasks import publish_note

    name = publish_note.name
    task_class = type(ctx.app.tasks[name])
    with transaction.atomic():
        note = Note.objects.create(text="committed")
        publish_note.delay_on_commit(note.pk)
        inside = _published(name)
    after_commit = _published(name)
    try:
        with transaction.atomic():
            rolled = Note.objects.create(text="rolled back")
            publish_note.apply_async_on_commit((rolled.pk,))
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    seen = wait_for_effects("note", timeout=ctx.timeout)
    return {"django_task": any(c.__name__ == "DjangoTask" for c in task_class.__mro__),
            "published_inside_transaction": inside, "published_after_commit": after_commit,
            "published_after_rollback": _published(name) - after_commit,
            "worker_saw": [e["text"] for e in seen]}
