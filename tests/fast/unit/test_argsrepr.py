"""``plain_repr`` gives exactly Celery's ``saferepr`` text, or declines."""

from __future__ import annotations

from typing import Any

from celery.utils.saferepr import saferepr
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_plus import Celery
from celery_plus.send.argsrepr import plain_repr

MAXSIZE = 1024
# Text at the edge of what plain_repr takes: plain letters around one character that may or
# may not be plain (quotes, backslash, control, non-ASCII, punctuation), or a length about
# its limit of 64.
edgy_text = st.one_of(
    st.builds(lambda a, c, b: a + c + b, st.text("az", max_size=3),
              st.sampled_from("'\"\\\n\t\xe9%{}:- _"), st.text("az", max_size=3)),
    st.text("az", min_size=62, max_size=66))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=80), edgy_text,
                    st.floats(allow_nan=False), st.binary(max_size=8))
values = st.one_of(
    # mostly plain: where plain_repr answers, one character or length off the limit
    st.lists(st.one_of(st.none(), st.integers(), edgy_text), min_size=1, max_size=3).map(tuple),
    st.dictionaries(edgy_text, st.one_of(st.integers(), edgy_text), max_size=2),
    st.lists(scalars, max_size=12), st.lists(scalars, max_size=12).map(tuple),
    st.dictionaries(st.text(max_size=20), scalars, max_size=8),
    st.lists(st.lists(scalars, max_size=3), max_size=3), st.text(), st.integers())


@settings(max_examples=300, deadline=None)  # a loaded machine: no per-example deadline
@given(values)
def test_plain_repr_is_saferepr_or_declines(value: Any) -> None:
    text = plain_repr(value, MAXSIZE)
    if text is not None:
        assert text == saferepr(value, MAXSIZE, maxlevels=3)


def test_plain_arguments_are_taken_and_others_declined() -> None:
    assert plain_repr((1, "a-b:c", None, True), MAXSIZE) == "(1, 'a-b:c', None, True)"
    assert plain_repr((7,), MAXSIZE) == "(7,)"
    assert plain_repr({"n": 3, "q": "x"}, MAXSIZE) == "{'n': 3, 'q': 'x'}"
    assert plain_repr({}, MAXSIZE) == "{}"
    for declined in [("it's",), ("a\nb",), (1.5,), ([1],), {1: 2}, ("é",), ("x" * 65,),
                     tuple(range(400)), 5]:
        assert plain_repr(declined, MAXSIZE) is None, declined


def test_a_message_carries_the_same_reprs_as_celery_writes() -> None:
    app = Celery("t", broker="memory://", set_as_current=False)
    for args, kwargs in [((1, "a"), {"k": None}), (("it's", [1, {"a": 2}]), {"z": 1.5}),
                         (None, None), ([], {})]:
        message = app.amqp.as_task_v2("id-1", "t.add", args, kwargs)
        assert message.headers["argsrepr"] == saferepr(args or (), 1024, maxlevels=3)
        assert message.headers["kwargsrepr"] == saferepr(kwargs or {}, 1024, maxlevels=3)
        assert message.sent_event is None
