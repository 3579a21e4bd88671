"""A Django site whose ``urls.py`` is docs/admin.md's Django recipe, run as written there.

``tests/deploy/e2e/test_admin_cli.py`` serves it with waitress in a process of its own (Django's
settings are process-wide) and drives the mounted dashboard over HTTP. The recipe's code
block is read from the docs and executed with ``proj.celery``'s app replaced by the end-to-end
harness's (the store of ``PLUS_TEST_PREFIX``, the token ``PLUS_TEST_ADMIN_TOKEN``), so the docs
show exactly what the test ran.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import django
from django.conf import settings

DOCS = Path(__file__).resolve().parents[3] / "docs" / "admin.md"
IMPORT = "from proj.celery import app as celery_app\n"


def recipe() -> str:
    """The Python block after the docs' ``**Django**`` paragraph."""
    text = DOCS.read_text()
    block = re.search(r"\*\*Django\*\*.*?```python\n(.*?)```", text, re.S)
    assert block is not None and IMPORT in block.group(1), "docs/admin.md's Django recipe"
    return block.group(1)


settings.configure(
    DEBUG=False, SECRET_KEY="test-only-" + "k" * 40, ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["127.0.0.1"], USE_TZ=True,
    MIDDLEWARE=["django.middleware.security.SecurityMiddleware",
                "django.middleware.common.CommonMiddleware",
                "django.middleware.csrf.CsrfViewMiddleware",
                "django.middleware.clickjacking.XFrameOptionsMiddleware"])
django.setup()

from tests.deploy.e2e import proj  # noqa: E402  (after Django's settings)

_namespace: dict[str, Any] = {
    "__name__": "docs_admin_django_recipe",
    "celery_app": proj.make_app(os.environ["PLUS_TEST_PREFIX"],
                                plus_admin_token=os.environ["PLUS_TEST_ADMIN_TOKEN"],
                                plus_admin_allowed_hosts=["127.0.0.1"])}
exec(compile(recipe().replace(IMPORT, ""), str(DOCS), "exec"), _namespace)
urlpatterns = _namespace["urlpatterns"]

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
