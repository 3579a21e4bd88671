"""Untrusted text made safe to show: on a terminal, in a page, at a bounded size.

Task names, queue names, arguments and errors come from whoever published the jobs. Shown as
they are they can clear an operator's screen or set its window title (terminal escape
sequences), reorder what a line appears to say (right-to-left overrides) or make a page of
hundreds of megabytes. Every value the CLI and the dashboard show goes through here.

* :func:`visible` spells out every character that is not plain printable text as an escape
  (``\\x1b``, ``\\u202e``, ``\\x00``): control characters (C0, DEL, C1), Unicode format
  characters (bidirectional overrides and isolates, zero-width joiners, BOM...), lone
  surrogates and private-use characters. ``keep`` names the ones a block may keep (a
  traceback keeps its newlines).
* :func:`clip` bounds a value to a number of characters and says how many it left out.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Callable

#: Unicode categories shown as escapes: control, format, surrogate, private use, unassigned.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
#: Line and paragraph separators (Zl, Zp) also break a terminal's or a table's lines.
_BREAKS = frozenset({"\u2028", "\u2029", "\x85"})


def _hidden(char: str) -> bool:
    return char in _BREAKS or unicodedata.category(char) in _HIDDEN_CATEGORIES


def escape_of(char: str) -> str:
    """How :func:`visible` writes ``char``: ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


# Everything that is certainly fine (printable ASCII): skips the per-character check.
_PLAIN = re.compile(r"[ -~]*")


def visible(text: object, keep: str = "", mark: Callable[[str], str] | None = None) -> str:
    """``text`` with every hidden character (see the module docstring) written as an escape;
    ``mark(escape)`` may decorate each escape (the dashboard shows them boxed)."""
    value = str(text)
    if _PLAIN.fullmatch(value):
        return value
    out = []
    for char in value:
        if char in keep or not _hidden(char):
            out.append(char)
        else:
            escape = escape_of(char)
            out.append(mark(escape) if mark else escape)
    return "".join(out)


def one_line(text: object) -> str:
    """``text`` on one line: runs of whitespace become one space, then :func:`visible`."""
    return visible(" ".join(str(text).split()))


def clip(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, and how many characters were left out."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def size_words(count: int) -> str:
    """``1.2 MB``, ``340 kB``, ``87 bytes``."""
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f} MB"
    if count >= 10_000:
        return f"{count // 1000} kB"
    return f"{count} bytes" if count != 1 else "1 byte"


def when(ms: int | None) -> str:
    """A store time (ms since the epoch) as UTC ``YYYY-MM-DD HH:MM:SS``."""
    if not ms:
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def age(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h10m``, ``3d4h``."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"
