"""A coalesced canvas member completes from its holder's result: without a result backend
there is none to follow, and the follower says so (docs/options.md, "Canvas"; the follower's
other outcomes run on real workers in tests/deploy/e2e/test_dropin_canvas.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from celery_plus import Celery
from celery_plus.send.follow import FollowError, follow


def test_following_without_a_result_backend_fails_saying_so(tmp_path: Path) -> None:
    app = Celery("nobackend", broker=f"plus+sqlite:///{tmp_path}/b.db", set_as_current=False)
    assert type(app.backend).__name__ == "DisabledBackend"
    with pytest.raises(FollowError, match="no result backend"):
        follow(SimpleNamespace(app=app), "holder-id")
