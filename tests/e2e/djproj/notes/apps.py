from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "tests.e2e.djproj.notes"
    label = "notes"
