"""A real Flower on a plus store: its Broker page and ``/api/queues/length`` answer from the
store (``celery_plus.contrib.flower``), where Flower alone answers 404 for a ``plus+`` broker.

``celery-plus -A proj flower`` installs the store's broker by itself; plain ``celery -A proj
flower`` does with the documented config file (``--conf``, the long run). Its workers and
tasks pages (remote control, and the events of ``worker -E``) work as on any broker (the long
run).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy.faults.servers import free_port

from .conftest import CELERY_PLUS, PLAIN_CELERY, ROOT, wait_until
from .proj import events

FLOWER_CONF = "from celery_plus.contrib.flower import install\ninstall()\n"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError:
        return 0, ""


@pytest.fixture
def flower(prefix: str, tmp_path: Path, broker_url: str) -> Iterator[Callable[[str], str]]:
    """Start Flower under ``cli`` (``celery-plus``, or ``celery`` with the config file) on
    the test's store; its base URL once it answers."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(cli: str) -> str:
        port = free_port()
        args = ["-A", "tests.deploy.e2e.proj", "flower", f"--port={port}",
                "--address=127.0.0.1"]
        if cli == "celery":
            conf = tmp_path / "flowerconfig.py"
            conf.write_text(FLOWER_CONF)
            args.append(f"--conf={conf}")
        program = CELERY_PLUS if cli == "celery-plus" else PLAIN_CELERY
        env = {**os.environ, "PLUS_TEST_PREFIX": prefix, "FLOWER_UNAUTHENTICATED_API": "1"}
        log = tmp_path / "flower.log"
        with open(log, "wb") as out:
            procs.append(subprocess.Popen([*program, *args], cwd=ROOT, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _get(f"{base}/healthcheck")[0] == 200
                   or procs[-1].poll() is not None, timeout=30, message="Flower up")
        assert procs[-1].poll() is None, log.read_text(errors="replace")
        return base

    yield start
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("cli", ["celery-plus", pytest.param("celery", marks=pytest.mark.long)])
def test_flower_broker_page_and_queue_lengths_read_the_store(client, flower, broker_kind,
                                                             cli):
    for n in range(3):
        client.tasks["proj.add"].delay(n, 1)
    client.tasks["proj.add"].apply_async((9, 9), countdown=600)
    base = flower(cli)

    status, body = _get(f"{base}/api/queues/length")
    assert status == 200, body
    assert json.loads(body) == {"active_queues": [
        {"name": "celery", "messages": 4, "messages_ready": 3, "messages_unacknowledged": 0}]}

    status, page = _get(f"{base}/broker")
    assert status == 200, page
    row = page[page.index('<tr id="celery">'):]
    cells = [cell.split(">", 1)[1] for cell in row.split("</td>")[:4]]
    assert [cell.rsplit(">", 1)[-1] for cell in cells] == ["celery", "4", "0", "3"], row[:400]


@pytest.mark.long
def test_flower_with_a_worker_lists_it_its_tasks_and_the_queue_lengths(
        client, flower, start_worker, prefix, broker_kind):
    """Flower's workers (remote control) and tasks (events, ``-E``) on a plus broker, and
    the queue lengths while the worker runs a job."""
    start_worker("-E", "--prefetch-multiplier=1")
    base = flower("celery-plus")

    def seen_by_events() -> bool:  # a heartbeat reached Flower: its event consumer is bound
        status, body = _get(f"{base}/workers?json=1")
        return status == 200 and any(str(w.get("hostname", "")).startswith(f"w0-{prefix}@")
                                     for w in json.loads(body)["data"])

    wait_until(seen_by_events, message="Flower's event state knows the worker")
    result = client.tasks["proj.add"].delay(20, 22)
    assert result.get(timeout=20) == 42

    def task_row() -> dict[str, object] | None:
        status, body = _get(f"{base}/api/tasks")
        row = json.loads(body).get(result.id) if status == 200 else None
        return row if row and row.get("state") == "SUCCESS" else None

    row = wait_until(task_row, message="the task in Flower's task list, succeeded")
    assert row["name"] == "proj.add" and row["result"] == "42", row
    assert str(row["worker"]).startswith(f"w0-{prefix}@"), row
    status, body = _get(f"{base}/api/workers?refresh=1")
    assert status == 200 and any(name.startswith(f"w0-{prefix}@")
                                 for name in json.loads(body)), body

    # One job running (claimed, under its lease), three waiting behind it.
    client.tasks["proj.sleep_mark"].delay(1, 6)
    wait_until(lambda: events(prefix, "start"), message="the sleeper started")
    for n in range(3):
        client.tasks["proj.add"].delay(n, 1)
    status, body = _get(f"{base}/api/queues/length")
    assert status == 200 and json.loads(body) == {"active_queues": [
        {"name": "celery", "messages": 4, "messages_ready": 3, "messages_unacknowledged": 1}]}, body
