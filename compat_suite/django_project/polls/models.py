"""The app's models: members whose tasks may fail a few times, and the record of task runs
``task_postrun`` keeps."""

from django.db import models


class Member(models.Model):
    username = models.CharField(max_length=100, unique=True)
    #: How many times a task has worked on this member (the flaky tasks fail the first ones).
    attempts = models.PositiveIntegerField(default=0)


class Note(models.Model):
    member = models.ForeignKey(Member, on_delete=models.CASCADE)
    text = models.CharField(max_length=200)


class TaskRun(models.Model):
    task_id = models.CharField(max_length=255)
    task_name = models.CharField(max_length=255)
    state = models.CharField(max_length=50)
    created = models.DateTimeField(auto_now_add=True)
