"""The project's URLs: the polls app's form."""

from django.urls import include, path

urlpatterns = [path("", include("polls.urls"))]
