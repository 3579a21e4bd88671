"""A view that enqueues, and the course's ``task_status`` view (``AsyncResult`` read from
django-celery-results' table)."""

from celery.result import AsyncResult
from django.http import HttpResponseBadRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from .tasks import add


@require_POST
def start_add(request):
    try:
        x, y = int(request.POST["x"]), int(request.POST["y"])
    except (KeyError, ValueError):
        return HttpResponseBadRequest("x and y must be integers")
    return JsonResponse({"task_id": add.delay(x, y).id})


@require_GET
def task_status(request):
    result = AsyncResult(request.GET["task_id"])
    ready = result.ready()
    return JsonResponse({
        "state": result.state,
        "result": result.result if ready and result.successful() else None,
    })
