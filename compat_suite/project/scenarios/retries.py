"""Retries: ``self.retry`` with a delay, ``autoretry_for`` with backoff, giving up."""

from itertools import pairwise

from celery import states

from proj.effects import effects
from proj.tasks.retries import fetch, sync_account
from scenarios.support import (
    EXECUTION_SIGNALS,
    Context,
    Outcome,
    error_of,
    on_time,
    scenario,
    signal_trail,
    wait_for,
)


def _attempts(kind: str, **match: str) -> tuple[list[int], list[tuple[float, float, str]]]:
    """The attempts' retry counts, and per retry: when the attempt before it started, when it
    started, and its ETA."""
    found = effects(kind, **match)
    return ([e["retries"] for e in found],
            [(a["t"], b["t"], b["eta"]) for a, b in pairwise(found)])


def _kept(retries: list[tuple[float, float, str]], delay: float) -> bool:
    """Every retry came ``delay`` seconds after the attempt before it (support.on_time)."""
    return bool(retries) and all(on_time(after, start, eta, delay)
                                 for after, start, eta in retries)


@scenario
def self_retry(ctx: Context) -> Outcome:
    """bind=True + self.retry: RETRY state while waiting, the retry count, giving up."""
    succeeds = fetch.delay("https://a.example", 2)
    gives_up = fetch.delay("https://b.example", 9)
    saw_retry = wait_for(lambda: succeeds.state == states.RETRY, "RETRY state", ctx.timeout,
                         interval=0.02)
    value = succeeds.get(timeout=ctx.timeout)
    gives_up.get(timeout=ctx.timeout, propagate=False)
    ok_retries, ok_gaps = _attempts("fetch_attempt", url="https://a.example")
    bad_retries, _ = _attempts("fetch_attempt", url="https://b.example")
    return {
        "result": value, "saw_retry_state": saw_retry,
        # default_retry_delay=0.5: each retry starts half a second after the failure.
        "retries": ok_retries, "retry_delay_kept": _kept(ok_gaps, 0.5),
        # Per attempt prerun, retry, postrun; where task_received falls between them depends
        # on when the broker delivers the retry, which Celery leaves open.
        "signals": signal_trail(succeeds.id, only=EXECUTION_SIGNALS),
        "publishes": signal_trail(succeeds.id).count("before_task_publish"),
        "given_up": {"state": gives_up.state, "error": error_of(gives_up),
                     "retries": bad_retries},
    }


@scenario
def autoretry(ctx: Context) -> Outcome:
    """autoretry_for + retry_backoff: retried with backoff until success or max_retries."""
    succeeds = sync_account.delay("acme", 2)
    gives_up = sync_account.delay("globex", 9)
    value = succeeds.get(timeout=ctx.timeout)
    gives_up.get(timeout=ctx.timeout, propagate=False)
    ok_retries, ok_gaps = _attempts("sync_attempt", account="acme")
    bad_retries, _ = _attempts("sync_attempt", account="globex")
    return {
        "result": value, "retries": ok_retries,
        # retry_backoff=True, retry_backoff_max=1, no jitter: 1 s before each retry.
        "backoff_kept": _kept(ok_gaps, 1.0),
        "given_up": {"state": gives_up.state, "error": error_of(gives_up),
                     "retries": bad_retries},
    }
