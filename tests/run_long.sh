#!/bin/sh
# The long run: what the README's test command leaves out (tests/deploy/matrix.py) — every
# store and pool variant of every deploy test (PLUS_FULL_MATRIX=1) and the tests marked `long`
# (PLUS_LONG=1): Celery's t/integration slice, the compatibility suite's pool and Django
# dimensions, the fault suite's long variants, the model and the admin's fuzzing on the
# servers. Figures: docs/tests.md.
set -e
cd "$(dirname "$0")/.."
export PLUS_LONG=1 PLUS_FULL_MATRIX=1
.venv/bin/pytest -q -n "${JOBS:-4}" tests/deploy "$@"
exec .venv/bin/pytest -q -n "${JOBS:-4}" -m long tests/stores tests/fast "$@"
