"""The kombu-channel behaviour suite (``tests/fast/channel``) on the server stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fast.channel.conftest import Store, channel_store

SERVER_STORES = ("redis", "postgres")


@pytest.fixture(params=SERVER_STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with channel_store(request.param, tmp_path) as made:
        yield made
