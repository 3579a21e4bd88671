"""Tasks that retry: explicitly with ``self.retry`` and automatically with ``autoretry_for``."""

import time

from proj.celery import app
from proj.effects import record


class TemporaryError(Exception):
    """A failure worth retrying."""


@app.task(bind=True, max_retries=3, default_retry_delay=0.5)
def fetch(self, url: str, failures: int) -> str:
    """Fails ``failures`` times, retrying after half a second each time."""
    record("fetch_attempt", url=url, retries=self.request.retries, t=time.time(),
           eta=self.request.eta)
    if self.request.retries < failures:
        raise self.retry(exc=TemporaryError(f"{url} unavailable"))
    return f"{url} fetched after {self.request.retries} retries"


@app.task(bind=True, autoretry_for=(TemporaryError,), retry_backoff=True, retry_backoff_max=1,
          retry_jitter=False, max_retries=2)
def sync_account(self, account: str, failures: int) -> str:
    """Fails ``failures`` times; ``autoretry_for`` retries with a (capped) exponential backoff."""
    record("sync_attempt", account=account, retries=self.request.retries, t=time.time(),
           eta=self.request.eta)
    if self.request.retries < failures:
        raise TemporaryError(f"{account}: upstream timed out")
    return f"{account} synced"
