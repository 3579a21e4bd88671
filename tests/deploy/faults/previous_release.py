"""The previous release, run from its own source beside this one (a rolling upgrade).

:data:`PREVIOUS_RELEASE` is the commit the rolling-upgrade test starts from. :func:`unpack`
writes its ``celery_plus`` and its fault app (``git archive``, no second ``pip install``)
into a folder. Run as a script, this file starts a process of that release::

    python previous_release.py FOLDER -A tests.deploy.faults.app worker ...
    python previous_release.py FOLDER publish OUT STOP EVERY

It puts FOLDER first on ``sys.path``, ahead of the editable install of this checkout (a
site-packages path entry, or setuptools' finder, which it appends to ``sys.meta_path`` after
the path's own), says on stderr which ``celery_plus`` it
imported (and exits if it is not FOLDER's), and runs ``celery-plus`` with the rest of the
arguments, or publishes a mix of jobs through the release's own fault app (one every EVERY
seconds until the file STOP exists), writing ``label<TAB>task id`` to OUT for each
acknowledged publish. Start it with FOLDER as its working directory too: Celery puts the
working directory first on ``sys.path`` when it loads ``-A``, which would otherwise load this
checkout's fault app.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

#: The release before the work on issue #27 (mixed releases): the last one users run, so the
#: one a rolling upgrade starts from. Raise it when a release lands (docs/tests.md).
PREVIOUS_RELEASE = "d1f9986bc2fa1448cc9e957b741d4097f9b836a6"
#: What a process of the previous release needs: its package and its fault app (the app
#: of this checkout sets settings the previous release does not know).
PATHS = ("celery_plus", "tests/__init__.py", "tests/deploy/__init__.py",
         "tests/deploy/faults/__init__.py", "tests/deploy/faults/app.py",
         "tests/deploy/faults/ledger.py")
#: The labels of the old publisher's jobs that retry once (two runs each).
RETRIED_PREFIX = "old-r"
#: The line a process of the previous release writes first (followed by the module's file).
IMPORTED = "previous release: celery_plus from "


def unpack(repo: Path, folder: Path, commit: str = PREVIOUS_RELEASE) -> Path:
    """``commit``'s :data:`PATHS` of git repository ``repo``, written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", commit, *PATHS],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def publish(out: Path, stop: Path, every: float) -> None:
    """Publish plain, ``concurrency=1``, unique, retrying and scheduled jobs until ``stop``
    exists."""
    from tests.deploy.faults.app import app  # the previous release's fault app

    n = 0
    with open(out, "a") as written:
        while not stop.exists():
            n += 1
            try:
                if n % 5 == 1:
                    label = f"old-l{n}"
                    result = app.send_task("fault.limited",
                                           ("a" if n % 2 else "b", label, 0.05))
                elif n % 5 == 2:
                    label = f"old-u{n}"
                    result = app.send_task("fault.unique", (label, 0.05))
                elif n % 5 == 3:  # runs twice: a retry (a continuation of the same id)
                    label = f"{RETRIED_PREFIX}{n}"
                    result = app.send_task("fault.retry_once", (label, 0.05))
                elif n % 5 == 4:  # scheduled, then due
                    label = f"old-c{n}"
                    result = app.send_task("fault.work", (label, 0.05), countdown=0.3)
                else:
                    label = f"old-w{n}"
                    result = app.send_task("fault.work", (label, 0.05))
            except Exception as exc:  # a store outage: not acknowledged, not counted
                print(f"publish {n} failed: {exc!r}", file=sys.stderr, flush=True)
            else:
                written.write(f"{label}\t{result.id}\n")
                written.flush()
            time.sleep(every)


def main(argv: list[str]) -> None:
    folder, *rest = argv
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [folder, *(p for p in sys.path if p not in ("", here))]
    import celery_plus

    print(f"{IMPORTED}{celery_plus.__file__}", file=sys.stderr, flush=True)
    if not str(Path(celery_plus.__file__).resolve()).startswith(str(Path(folder).resolve())):
        raise SystemExit(f"celery_plus was not imported from {folder}")
    if rest[0] == "publish":
        publish(Path(rest[1]), Path(rest[2]), float(rest[3]))
        return
    from celery_plus.cli import main as cli

    sys.argv = ["celery-plus", *rest]
    cli()


if __name__ == "__main__":
    main(sys.argv[1:])
