#!/bin/sh
# The model-based tests (tests/fast/model, tests/stores/model) with a long budget: every store against the model,
# PLUS_MODEL_EXAMPLES examples (default 2000) of up to PLUS_MODEL_STEPS steps (default 60)
# each, one store per process. Needs Redis (PLUS_MODEL_REDIS, default database 12 of
# 127.0.0.1:6379) and PostgreSQL (PLUS_TEST_PG). Figures: docs/model.md. Extra arguments go to
# pytest (e.g. -k redis).
set -e
cd "$(dirname "$0")/../../.."
export PLUS_MODEL_EXAMPLES="${PLUS_MODEL_EXAMPLES:-2000}"
export PLUS_MODEL_STEPS="${PLUS_MODEL_STEPS:-60}"
exec .venv/bin/pytest -q --timeout=0 -n 3 --durations=3 tests/fast/model/test_model.py tests/stores/model/test_model.py "$@"
