from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "tests.deploy.e2e.djproj.notes"
    label = "notes"
