"""How a delivery that cannot run is described when it is dead-lettered."""

from __future__ import annotations

from typing import Any

#: The reason of a message that is no kombu message, or whose body cannot be decoded.
MALFORMED = "malformed message"


def failure_detail(reason: str, exc: BaseException | None = None, **extra: Any) -> dict[str, Any]:
    """A settle's failure details: the reason, the exception's type and text, and ``extra``."""
    detail: dict[str, Any] = {"reason": reason}
    if exc is not None:
        detail["exc_type"] = type(exc).__name__
        detail["exc_message"] = str(exc)
    detail.update(extra)
    return detail
