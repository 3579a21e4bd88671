"""The same cases as the fast tier's module, on the server stores (``conftest.py``)."""

from tests.fast.conformance.test_start_marks import *  # noqa: F403
from tests.support import keep_tests_using

keep_tests_using(globals(), "backend", "make_backend", "backend_kind", "inspect")
