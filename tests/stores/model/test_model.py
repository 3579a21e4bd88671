"""Model-based tests on the server stores: Redis and PostgreSQL against the reference model
(``tests/fast/model``: the machine, its clocks and its CI budget; SQLite runs there)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fast.model.clocks import (
    PostgresSchema,
    PostgresUnderTest,
    RedisUnderTest,
    postgres_schema,
)
from tests.fast.model.machine import OPTIONS, StoreVsModel
from tests.fast.model.test_model import run_model

# Random sequences for a minute and a half on the servers: tests/run_long.sh. The README's
# suite runs the model on memory and SQLite (tests/fast/model) and every rule on these
# stores case by case (tests/stores/conformance).
pytestmark = pytest.mark.long


def test_redis_agrees_with_the_model() -> None:
    class OnRedis(StoreVsModel):
        open_store = staticmethod(lambda clock: RedisUnderTest(clock, OPTIONS))

    run_model(OnRedis, "redis")


@pytest.fixture
def schema() -> Iterator[PostgresSchema]:
    with postgres_schema(OPTIONS) as made:
        yield made


def test_postgres_agrees_with_the_model(schema: PostgresSchema) -> None:
    class OnPostgres(StoreVsModel):
        open_store = staticmethod(lambda clock: PostgresUnderTest(clock, schema))

    run_model(OnPostgres, "postgres")
