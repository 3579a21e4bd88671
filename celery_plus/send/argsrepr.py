"""The ``argsrepr`` and ``kwargsrepr`` headers of a task message, cheaper for plain arguments.

Celery writes ``saferepr(args)`` and ``saferepr(kwargs)`` into every message it builds
(``AMQP.as_task_v2``): a streaming repr, token by token, about 7% of a ``delay()``'s own CPU
(docs/benchmarks.md, "The plain publish"). For a tuple or list of ints, bools, None and short
plain strings, and a dict of such values under such keys, ``saferepr``'s text is ``repr``'s
(tests/fast/unit/test_argsrepr.py compares the two); :func:`plain_repr` gives it then, and
None for anything else, which Celery's ``saferepr`` then writes as before.
"""

from __future__ import annotations

import re
from typing import Any

#: A string ``saferepr`` quotes as ``repr`` does: short, no quote, backslash or
#: non-printable character.
_PLAIN_TEXT = re.compile(r"[\w .:/@+=,;!?#%&*()<>\[\]{}|~^$-]{0,64}", re.ASCII).fullmatch


def _plain(value: Any) -> bool:
    kind = type(value)
    return (kind is int or kind is bool or value is None
            or (kind is str and _PLAIN_TEXT(value) is not None))


def plain_repr(value: Any, maxsize: int) -> str | None:
    """``saferepr(value, maxsize)`` for plain arguments (see the module), else None."""
    kind = type(value)
    if kind is tuple or kind is list:
        plain = all(map(_plain, value))
    elif kind is dict:
        plain = all(type(k) is str and _plain(k) and _plain(v) for k, v in value.items())
    else:
        return None
    if not plain:
        return None
    text = repr(value)
    # Well within the bound: saferepr would cut nothing.
    return text if len(text) < maxsize // 2 else None
