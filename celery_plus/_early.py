"""Runs first when ``celery_plus`` is imported: the ``celery-plus`` command's green patching.

``celery -A proj worker -P gevent`` works because Celery's ``celery/__main__.py`` calls
``celery.maybe_patch_concurrency()`` before it imports anything that creates sockets, locks
or threads. The ``celery-plus`` command's code lives in this package, so the package itself
does the same, first of all, when (and only when) the process is that command: the console
script ``celery-plus`` or ``python -m celery_plus.cli``. Anything else that imports
``celery_plus`` (a project, a test, plain ``celery``) is left alone.
"""

from __future__ import annotations

import os
import sys

COMMAND = "celery-plus"
MODULES = ("celery_plus.cli", "celery_plus")


def is_the_command(argv0: str, orig_argv: list[str]) -> bool:
    """True for the ``celery-plus`` console script or ``python -m celery_plus.cli``."""
    if os.path.basename(argv0 or "") == COMMAND:
        return True
    args = iter(orig_argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None) in MODULES
        if arg.startswith("-m"):
            return arg[2:] in MODULES
        if arg in ("-X", "-W"):  # the interpreter's options that take a value
            next(args, None)
        elif not arg.startswith("-") or arg.startswith("-c"):
            return False  # a script or -c: not the command
    return False


def patch_concurrency() -> None:
    """``-P gevent`` / ``-P eventlet`` on the command line: monkey-patch now (not for
    ``multi``, which only starts other processes), as Celery's command does."""
    if "multi" in sys.argv or not is_the_command(sys.argv[0] if sys.argv else "",
                                                   list(getattr(sys, "orig_argv", []))):
        return
    from celery import maybe_patch_concurrency

    maybe_patch_concurrency(sys.argv)


patch_concurrency()
