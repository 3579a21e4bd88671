from django.db import models


class Note(models.Model):
    text = models.CharField(max_length=200)
    seen_by_worker = models.BooleanField(default=False)
