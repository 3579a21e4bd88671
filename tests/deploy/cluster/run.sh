#!/bin/sh
# The Redis Cluster runs kept out of the default suite (docs/redis-cluster.md): every
# queue-scoped conformance test on a local cluster, the end-to-end smoke, and the failover
# scenarios (a primary killed mid-drain, with and without plus_redis_wait_replicas=1).
# Each starts its own cluster on loopback ports 7100-7199 and kills it at the end.
set -e
cd "$(dirname "$0")/../../.."
PY=${PYTHON:-.venv/bin/python}
export PLUS_REDIS_CLUSTER_FULL=1
$PY -m pytest -q -p no:cacheprovider -n 2 tests/stores/conformance -k redis-cluster "$@"
$PY -m pytest -q -p no:cacheprovider tests/deploy/e2e/test_redis_cluster.py "$@"
$PY -m pytest -q -p no:cacheprovider -s tests/deploy/cluster/test_failover.py "$@"
