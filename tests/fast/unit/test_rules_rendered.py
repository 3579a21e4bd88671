"""The rules' constants are written once, in ``celery_plus/model/rules.py``.

The stores render them (the Redis Lua library: ``stores/redis/scripts.py``; PostgreSQL:
``functions/rules.sql`` through ``stores/postgres/migrations.py``) or import them (SQLite, the
in-process store) instead of retyping them. The rendered values themselves are checked against
a server in ``tests/stores/test_redis_scripts.py`` and ``tests/stores/test_postgres_functions.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

from celery_plus.model import rules
from celery_plus.stores.postgres import migrations as pg_migrations
from celery_plus.stores.redis import scripts

PACKAGE = Path(rules.__file__).resolve().parents[1]
#: The priority factor however it is spelled: 1 << 40, 2**40, 2^40, 1099511627776.
FACTOR = re.compile(r"1\s*<<\s*40\b|\b2\s*\*\*\s*40\b|\b2\s*\^\s*40\b|1_?099_?511_?627_?776")


def test_the_priority_factor_is_written_once_in_rules_py() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".lua", ".sql", ".md", ".txt") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FACTOR.search(line):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert len(found) == 1 and found[0].startswith("celery_plus/model/rules.py:") \
        and found[0].endswith(": PRIORITY_FACTOR = 1 << 40"), (
        "the priority factor retyped outside model/rules.py (use rules.PRIORITY_FACTOR, "
        "PRIORITY_FACTOR in Lua, priority_factor() in SQL):\n" + "\n".join(found))


def test_the_stores_render_every_constant_of_the_rules() -> None:
    lua = scripts.render_rules()
    sql = {f.name: f.sql for f in pg_migrations.function_files()}["rules"]
    for name, value in rules.RENDERED.items():
        if isinstance(value, tuple):
            members = ", ".join(f"['{v}'] = true" for v in value)
            assert f"local {name} = {{{members}}}\n" in lua
            assert "ARRAY[" + ", ".join(f"'{v}'" for v in value) + "]" in sql
        else:
            assert f"local {name} = {value}\n" in lua
            assert f"{value}::" in sql
    assert "@rules" not in scripts.lib_lua()
    assert "{{" not in sql


def test_the_sqlite_store_uses_the_rules_own_constants() -> None:
    from celery_plus.stores.sqlite import backend

    assert backend.PRIORITY_FACTOR is rules.PRIORITY_FACTOR
    assert backend.HISTORY_MAX is rules.HISTORY_MAX
    assert backend.FINISHED is rules.FINISHED and backend.WAITING is rules.WAITING
