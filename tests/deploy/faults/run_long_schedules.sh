#!/bin/sh
# Issue #16's long runs on every store: beat (10 minutes, three processes, two leader
# SIGKILLs; the stores in parallel) and cluster rate limits (3 minutes, 60/m, four workers of
# two processes; one store after another). Needs Redis (PLUS_TEST_REDIS) and PostgreSQL
# (PLUS_TEST_PG). One JSON report a line in .long-periodic.jsonl / .long-rate-limits.jsonl;
# figures: docs/schedules.md, docs/rate-limits.md. Every run goes to its end whatever another
# one found (a failed run does not stop the others, nor the load reading at the end); the exit
# status is 1 if any run failed.
cd "$(dirname "$0")/../../.." || exit 1
uptime
pids=""
for store in redis sqlite postgres; do
    .venv/bin/python -W ignore -m tests.deploy.faults.long_periodic --store "$store" &
    pids="$pids $!"
done
status=0
for store in redis sqlite postgres; do
    .venv/bin/python -W ignore -m tests.deploy.faults.long_rate_limits --store "$store" || status=1
done
for pid in $pids; do
    wait "$pid" || status=1
done
uptime
exit "$status"
