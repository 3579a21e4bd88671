from django.apps import AppConfig


class NotesConfig(AppConfig):
    name = "djsite.notes"
    label = "notes"
