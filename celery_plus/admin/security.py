"""Who may read and change what on the dashboard, and the checks every request passes.

* **Two secrets.** ``plus_admin_token`` is the operators' (read and act);
  ``plus_admin_read_token`` a reader's (pages, JSON, ``/metrics``; no action). Either is
  presented as the password of HTTP Basic auth (any user name) or as ``Authorization: Bearer
  <token>``, and compared in constant time. With neither set the dashboard is read-only and
  open (for localhost); with one set, reading needs one of them too unless
  ``plus_admin_public_read``.
* **Allowed hosts.** The request's ``Host`` must be one the dashboard answers to
  (``plus_admin_allowed_hosts``; default: the loopback names), so a page whose DNS name is
  rebound to 127.0.0.1 cannot read it.
* **Cross-site posts.** A browser sends cached Basic credentials with a form another site
  makes it post, so a POST authenticated by Basic must also carry the form token of this
  browser's session (:mod:`.sessions`: signed with the admin secret, expiring; the session
  cookie is ``SameSite=Strict``, ``HttpOnly``), good in every process of a multi-process
  server and across restarts, and unknown to any other browser. Every POST is also refused
  when ``Sec-Fetch-Site`` says it comes from another site or ``Origin`` names another
  host. A POST authenticated by a Bearer header needs no form token (no browser adds that
  header by itself).
* **Signed messages.** The banner after an action (``?msg=``) is shown only with the
  signature the dashboard made for it (itsdangerous), so a link cannot put words in the
  dashboard's mouth.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import quote, urlsplit

from itsdangerous import Signer

Environ = dict[str, Any]

#: Host names a dashboard answers to when ``plus_admin_allowed_hosts`` is not set.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: The session cookie that binds the form token to one browser.
SESSION_COOKIE = "plus_admin_session"
#: Set by a log-out until the browser closes (as its cached Basic credentials): the next
#: request with Basic credentials is challenged, so the browser forgets them and asks.
LOGGED_OUT_COOKIE = "plus_admin_out"
_SESSION = re.compile(r"[A-Za-z0-9_.-]{32,200}")
_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::\d{1,5})?")

#: Roles, from least to most.
ANONYMOUS, READER, OPERATOR = "anonymous", "reader", "operator"


@dataclass(frozen=True)
class Identity:
    """Who a request is: its role, and whether its credentials came in a Bearer header."""

    role: str
    bearer: bool = False
    #: Credentials were presented and matched no secret.
    wrong: bool = False


def presented_secret(environ: Environ) -> tuple[str | None, bool]:
    """(the secret of the ``Authorization`` header, whether it is a Bearer token)."""
    header = str(environ.get("HTTP_AUTHORIZATION") or "")
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None, True
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None, False
        return decoded.partition(":")[2] or None, False
    return None, False


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def same_secret(presented: str, secret: str | None) -> bool:
    """Whether ``presented`` is ``secret``, in a time that tells nothing of either: their
    fixed-length digests are compared (``compare_digest`` of the values themselves returns
    at once when the lengths differ, which tells an attacker the secret's length)."""
    return secret is not None and hmac.compare_digest(_digest(presented), _digest(secret))


def host_of(value: str) -> str:
    """The host name of a ``Host`` header or URL netloc, lower-case, without port, brackets
    or the trailing dot of a fully qualified name (``localhost.`` is ``localhost``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value[1:]
    return (value.rpartition(":")[0] if value.count(":") == 1 else value).removesuffix(".")


def _explicit_port(netloc: str) -> int | None:
    """The port a ``Host`` header or URL netloc names (None: the scheme's default)."""
    tail = netloc.rpartition("]")[2] if netloc.startswith("[") else netloc
    head, colon, port = tail.rpartition(":")
    return int(port) if colon and port.isdigit() and (head or netloc.startswith("[")) else None


#: The port of an origin that names none.
_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_allowed(host: str, patterns: Iterable[str]) -> bool:
    """``host`` (no port) matches a pattern: ``*``, the name itself, or ``.example.com``
    (it and its subdomains)."""
    for pattern in patterns:
        pattern = pattern.lower().strip("[]").removesuffix(".")
        if pattern == "*" or pattern == host:
            return True
        if pattern.startswith(".") and (host == pattern[1:] or host.endswith(pattern)):
            return True
    return False


class Access:
    """The dashboard's access rules (see the module docstring)."""

    def __init__(self, admin_token: str | None, read_token: str | None = None,
                 public_read: bool = False,
                 allowed_hosts: Iterable[str] | None = None) -> None:
        self.admin_token = admin_token
        self.read_token = read_token
        self.public_read = public_read
        self.allowed_hosts = tuple(LOOPBACK_HOSTS if allowed_hosts is None else allowed_hosts)
        self._listed = tuple(h for h in self.allowed_hosts if h != "*")

    @property
    def read_only(self) -> bool:
        """No admin secret: nothing can be changed from the dashboard."""
        return self.admin_token is None

    def identify(self, environ: Environ) -> Identity:
        presented, bearer = presented_secret(environ)
        if presented is None:
            return Identity(ANONYMOUS, wrong=bool(environ.get("HTTP_AUTHORIZATION")))
        if same_secret(presented, self.admin_token):
            return Identity(OPERATOR, bearer)
        if same_secret(presented, self.read_token):
            return Identity(READER, bearer)
        return Identity(ANONYMOUS, bearer, wrong=True)

    def may_read(self, who: Identity) -> bool:
        if who.role != ANONYMOUS:
            return True
        return self.public_read or (self.admin_token is None and self.read_token is None)

    # -- the Host header ----------------------------------------------------------------
    def host_problem(self, environ: Environ) -> str | None:
        """Why the request's ``Host`` is refused (None: it is allowed)."""
        raw = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
        if not _HOST.fullmatch(raw):
            return "the request has no valid Host header"
        if not host_allowed(host_of(raw), self.allowed_hosts):
            return (f"host {host_of(raw)!r} is not one this dashboard answers to: add it to "
                    "plus_admin_allowed_hosts (celery-plus admin: --allowed-host)")
        return None

    # -- cross-site posts ---------------------------------------------------------------
    def cross_site_problem(self, environ: Environ) -> str | None:
        """Why a POST looks cross-site (None: it does not)."""
        site = environ.get("HTTP_SEC_FETCH_SITE")
        if site is not None and site not in ("same-origin", "none"):
            return f"refused a {site} request: actions are taken from the dashboard's own pages"
        origin = environ.get("HTTP_ORIGIN")
        if origin is None or (origin == "null" and site == "same-origin"):
            return None  # (a browser's own form under a no-referrer policy says null)
        parts = urlsplit(origin) if origin != "null" else None
        netloc = parts.netloc if parts is not None else ""
        raw_host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME") or "")
        own, theirs = host_of(raw_host), host_of(netloc) if netloc else ""
        # An origin without a port is on its scheme's (http://127.0.0.1 is port 80); a Host
        # without one says nothing (a proxy may have dropped it).
        port = _explicit_port(raw_host)
        their_port = _explicit_port(netloc) if netloc else None
        if their_port is None and parts is not None:
            their_port = _DEFAULT_PORTS.get(parts.scheme.lower())
        other_port = None not in (port, their_port) and port != their_port
        # Another host is the dashboard's own only if listed (a proxy that rewrites Host).
        # The same host on another port is another origin (another service), and so is a
        # loopback name on another port, though listed (they are by default): 127.0.0.1:9999
        # posting to localhost:8055 is another program on the operator's machine.
        if not theirs or (other_port and (theirs == own or theirs in LOOPBACK_HOSTS)) or (
                theirs != own and not host_allowed(theirs, self._listed)):
            return (f"refused a request from origin {origin[:100]!r}: actions are taken from "
                    "the dashboard's own pages")
        return None

    # -- signed messages ----------------------------------------------------------------
    def _signer(self) -> Signer:
        assert self.admin_token is not None
        return Signer(self.admin_token, salt="celery-plus admin message")

    def sign(self, message: str) -> str:
        return self._signer().get_signature(message).decode()

    def signed(self, message: str, signature: str) -> bool:
        if self.admin_token is None or not message:
            return False
        return self._signer().verify_signature(message, signature)


def _cookie(environ: Environ, name: str) -> str | None:
    """The value of cookie ``name`` of the request (None: none, or unreadable)."""
    raw = str(environ.get("HTTP_COOKIE") or "")
    if name not in raw:
        return None
    try:
        cookie: SimpleCookie = SimpleCookie(raw)
    except CookieError:
        return None
    morsel = cookie.get(name)
    return None if morsel is None else morsel.value


def session_of(environ: Environ) -> str | None:
    """This browser's session cookie (None: none or malformed; :mod:`.sessions` checks
    its signature and age)."""
    value = _cookie(environ, SESSION_COOKIE)
    return value if value is not None and _SESSION.fullmatch(value) else None


def logged_out(environ: Environ, admin_token: str | None) -> bool | None:
    """Whether this browser logged out and has not been asked for credentials since: True
    (the mark this dashboard signed), False (a mark it did not sign: another origin on this
    host can plant one), None (no mark)."""
    value = _cookie(environ, LOGGED_OUT_COOKIE)
    if value is None:
        return None
    return admin_token is not None and _mark_signer(admin_token).validate(value)


def _mark_signer(admin_token: str) -> Signer:
    return Signer(admin_token, salt="celery-plus admin logged out")


def _set_cookie(name: str, value: str, environ: Environ, same_site: str,
                path_info: str = "") -> tuple[str, str]:
    """A ``Set-Cookie`` header scoped to the dashboard's mount point (plus ``path_info``),
    for the browser's session (an empty ``value``: the browser forgets the cookie)."""
    # Percent-encoded as the dashboard's links are (markup.Urls): a browser matches a cookie's
    # Path against the encoded URL, and a raw ';' or space would end the attribute.
    mount = str(environ.get("SCRIPT_NAME") or "").rstrip("/") + path_info
    path = quote(mount, safe="/") or "/"
    secure = "; Secure" if environ.get("wsgi.url_scheme") == "https" else ""
    forget = "" if value else "; Max-Age=0"
    return ("Set-Cookie", f"{name}={value}; Path={path}; HttpOnly; "
                          f"SameSite={same_site}{secure}{forget}")


def session_header(cookie: str, environ: Environ) -> tuple[str, str]:
    """The ``Set-Cookie`` header of a session cookie (an empty ``cookie``: the browser
    forgets its session)."""
    return _set_cookie(SESSION_COOKIE, cookie, environ, "Strict")


def logged_out_header(environ: Environ, admin_token: str) -> tuple[str, str]:
    """The ``Set-Cookie`` header of the logged-out mark, signed. ``Lax``: it grants nothing,
    and must reach a page opened from a link elsewhere too."""
    mark = _mark_signer(admin_token).sign("out").decode()
    return _set_cookie(LOGGED_OUT_COOKIE, mark, environ, "Lax")


def forget_logged_out(environ: Environ) -> list[tuple[str, str]]:
    """``Set-Cookie`` headers that clear the logged-out mark at the mount point and at every
    path from there to this request's (a planted mark may carry any of them)."""
    parts = str(environ.get("PATH_INFO") or "").strip("/").split("/")
    paths = [""] + ["/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1) if parts[0]]
    return [_set_cookie(LOGGED_OUT_COOKIE, "", environ, "Lax", path) for path in paths[:8]]
