#!/bin/sh
# The fault suite's long variants (the issue's figures: a 30 s lease, a 20 s outage, a
# 20 s full disk, 40 kills, 20 rounds of ended sessions, a 31 s freeze; and 50 rounds of
# ended sessions under a 10 s lease; a 15 s stall leaving half-open links, and a publish through
# a stalled link, with the default bounds; writes refused for 10 s: Redis NOREPLICAS, PostgreSQL
# read-only, a read-only SQLite file; partitions of 0.5, 1 and 3 leases (the link stalled, reset
# or left half-open); a rolling upgrade from the previous release on every store, and across a
# Redis restart; retries published and a task
# failing while Redis is down), then the report.
# Needs root (a tmpfs for SQLite, PostgreSQL run as the postgres user), redis-server and
# PostgreSQL 15's initdb/pg_ctl (PLUS_FAULT_PG_BIN). Figures go to docs/reliability.md.
set -e
cd "$(dirname "$0")/../../.."
export PLUS_LONG=1 PLUS_FULL_MATRIX=1
export PLUS_FAULT_REPORT="${PLUS_FAULT_REPORT:-$PWD/.faults-report-long.jsonl}"
rm -f "$PLUS_FAULT_REPORT"
exec .venv/bin/pytest -q -p no:randomly -n "${JOBS:-2}" -m long tests/deploy/faults "$@"
