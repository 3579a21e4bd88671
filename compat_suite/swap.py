"""The import swap, done literally: a copy of the project whose ``celery`` imports read
``celery_plus``.

``from celery import X`` / ``from celery.sub import X`` become ``from celery_plus... import X``
and ``import celery`` becomes ``import celery_plus as celery``; nothing else changes. The copy
is then checked with :mod:`ast`: no import of ``celery`` may remain.
"""

from __future__ import annotations

import ast
import re
import shutil
import threading
from pathlib import Path

FROM_CELERY = re.compile(r"^(\s*from\s+)celery(\.[\w.]+)?(\s+import\b)", re.MULTILINE)
IMPORT_CELERY = re.compile(r"^(\s*import\s+)celery(\s*(?:#.*)?)$", re.MULTILINE)
IMPORT_CELERY_SUBMODULE = re.compile(r"^\s*import\s+celery\.", re.MULTILINE)


#: ``ast.parse`` is not thread-safe on CPython 3.11 (the AST converter's recursion counter is
#: shared: "SystemError: AST constructor recursion depth mismatch", CPython gh-106905), and
#: ``compat_suite.run`` materialises configurations on a thread pool.
_PARSE_LOCK = threading.Lock()


class SwapError(ValueError):
    """The project uses an import form the swap does not rewrite."""


def swap_source(source: str, filename: str = "<source>") -> str:
    """``source`` with its Celery imports pointing at celery_plus."""
    if IMPORT_CELERY_SUBMODULE.search(source):
        raise SwapError(f"{filename}: 'import celery.<module>' is not rewritten; "
                        "write 'from celery.<module> import ...' instead")
    swapped = FROM_CELERY.sub(lambda m: f"{m[1]}celery_plus{m[2] or ''}{m[3]}", source)
    swapped = IMPORT_CELERY.sub(lambda m: f"{m[1]}celery_plus as celery{m[2]}", swapped)
    left = celery_imports(swapped)
    if left:
        raise SwapError(f"{filename}: imports still naming celery after the swap: {left}")
    return swapped


def celery_imports(source: str) -> list[str]:
    """Modules named ``celery``/``celery.*`` that ``source`` imports (absolute imports only)."""
    found = []
    with _PARSE_LOCK:
        tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [n for n in names if n == "celery" or n.startswith("celery.")]
    return found


def materialise(project: Path, target: Path) -> list[Path]:
    """Copy ``project`` to ``target`` with every ``.py`` file swapped; return the files whose
    imports changed."""
    shutil.copytree(project, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    changed = []
    for path in sorted(target.rglob("*.py")):
        source = path.read_text()
        swapped = swap_source(source, str(path.relative_to(target)))
        if swapped != source:
            path.write_text(swapped)
            changed.append(path)
    return changed
