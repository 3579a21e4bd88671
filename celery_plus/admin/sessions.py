"""An operator's browser session and its form tokens, signed and expiring (itsdangerous).

The session cookie (``plus_admin_session``) carries a random session id signed with the
operator's secret and the time it was issued: it is good for :data:`SESSION_MAX_AGE`, then
the browser must log in again (``/login``). A form token is the session id signed again,
with its own time: good for :data:`FORM_MAX_AGE` and in that browser only. Logging out ends
the session in this process (a later request with its cookie is challenged: :mod:`.web`);
every process refuses it once it expires (another process, or this one after a restart,
takes it until then: harmless, since the cookie authenticates nothing by itself). Nothing is
stored but the ids logged out, until they would have expired anyway. Changing
``plus_admin_token`` ends every session and form.
"""

from __future__ import annotations

import secrets
import threading
import time

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

#: Seconds a browser session lasts from its login.
SESSION_MAX_AGE = 12 * 3600
#: Seconds a form stays good after its page was served.
FORM_MAX_AGE = 3600
#: Most logged-out ids remembered (the oldest are forgotten first).
MAX_ENDED = 100_000

#: What a session cookie says.
VALID, NONE, EXPIRED, ENDED = "valid", "none", "expired", "ended"


class Sessions:
    """Sessions signed with ``secret`` (see the module docstring)."""

    def __init__(self, secret: str, max_age: int = SESSION_MAX_AGE,
                 form_max_age: int = FORM_MAX_AGE) -> None:
        self._cookies = URLSafeTimedSerializer(secret, salt="celery-plus admin session")
        self._forms = URLSafeTimedSerializer(secret, salt="celery-plus admin form")
        self.max_age, self.form_max_age = max_age, form_max_age
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self) -> tuple[str, str]:
        """A new session: (its id, its cookie value)."""
        sid = secrets.token_urlsafe(24)
        return sid, self._cookies.dumps(sid)

    def open(self, cookie: str | None) -> tuple[str, str | None]:
        """(:data:`VALID`, the id) or (:data:`NONE` / :data:`EXPIRED` / :data:`ENDED`,
        None) for a cookie value (None: no cookie). A forged one is as good as none."""
        if not cookie:
            return NONE, None
        try:
            sid = self._cookies.loads(cookie, max_age=self.max_age)
        except SignatureExpired:
            return EXPIRED, None
        except BadSignature:
            return NONE, None
        if not isinstance(sid, str):
            return NONE, None
        with self._lock:
            if sid in self._ended:
                return ENDED, None
        return VALID, sid

    def end(self, sid: str) -> None:
        """Log the session out (in this process)."""
        now = time.monotonic()
        with self._lock:
            for old, when in list(self._ended.items()):
                if now - when > self.max_age or len(self._ended) >= MAX_ENDED:
                    del self._ended[old]
                else:
                    break  # (in insertion order: the rest are younger)
            self._ended[sid] = now

    def form_token(self, sid: str) -> str:
        return self._forms.dumps(sid)

    def form_token_ok(self, sid: str | None, token: str) -> bool:
        """Whether ``token`` was made for session ``sid`` less than :data:`FORM_MAX_AGE` ago."""
        if sid is None or not token:
            return False
        try:
            return bool(self._forms.loads(token, max_age=self.form_max_age) == sid)
        except BadSignature:  # (SignatureExpired is one)
            return False
