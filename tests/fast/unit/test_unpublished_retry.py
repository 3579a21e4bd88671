"""A retry whose publish met an outage gives its delivery back (``send/unpublished_retry.py``).

Celery's ``Task.retry`` turns a failed publish into ``Reject(requeue=False)`` (a dead letter);
a publish that could not reach the broker or store (kombu's ``OperationalError``) becomes
``RetryNotPublished``, a ``Reject`` with requeue, while any other failure keeps Celery's
rejection. The worker-level behaviour, through a real Redis outage:
``tests/deploy/faults/test_retry_outage.py``.
"""

from __future__ import annotations

import pickle
from typing import Any
from unittest import mock

import pytest
from celery.canvas import Signature
from celery.exceptions import Reject
from kombu.exceptions import EncodeError, OperationalError

from celery_plus import Celery
from celery_plus.send.unpublished_retry import REASON, RetryNotPublished, give_back_unpublished


def test_an_outage_rejection_becomes_a_give_back() -> None:
    given = give_back_unpublished(Reject(OperationalError("Connection refused"), requeue=False))
    assert isinstance(given, RetryNotPublished) and given.requeue
    assert given.reason == f"{REASON}: OperationalError: Connection refused"


@pytest.mark.parametrize("reject", [
    Reject(EncodeError("cannot encode"), requeue=False),  # asking again fails again
    Reject(OperationalError("down"), requeue=True),  # already given back
    Reject("a task's own rejection", requeue=False),
])
def test_other_rejections_stay_as_they_are(reject: Reject) -> None:
    assert give_back_unpublished(reject) is None


def test_the_give_back_crosses_a_process_boundary() -> None:
    """A prefork pool process sends it to the worker pickled: it must stay a requeue."""
    given = give_back_unpublished(Reject(OperationalError("down"), requeue=False))
    back = pickle.loads(pickle.dumps(given))
    assert isinstance(back, RetryNotPublished) and back.requeue
    assert back.reason == given.reason  # type: ignore[union-attr]


def _retrying_task(publish_error: Exception) -> Any:
    app = Celery("unpublished", broker="plus+memory://unpublished-retry", set_as_current=False)

    @app.task(bind=True, max_retries=3)
    def again(self: Any) -> None:
        raise self.retry(countdown=5)

    def run() -> None:
        again.push_request(id="job-1", retries=0, called_directly=False, is_eager=False)
        try:
            with mock.patch.object(Signature, "apply_async", side_effect=publish_error):
                again.run()
        finally:
            again.pop_request()

    return run


def test_task_retry_gives_back_what_an_outage_stopped() -> None:
    with pytest.raises(RetryNotPublished) as caught:
        _retrying_task(OperationalError("Error 111 connecting. Connection refused."))()
    assert caught.value.requeue
    assert isinstance(caught.value.__cause__, OperationalError)


def test_task_retry_keeps_celerys_rejection_otherwise() -> None:
    with pytest.raises(Reject) as caught:
        _retrying_task(EncodeError("cannot encode"))()
    assert not isinstance(caught.value, RetryNotPublished) and not caught.value.requeue
