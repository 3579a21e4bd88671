from django.urls import path

from . import views

urlpatterns = [
    path("add/", views.start_add, name="start_add"),
    path("task_status/", views.task_status, name="task_status"),
]
