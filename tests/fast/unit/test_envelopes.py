"""A claimed message this release cannot read is reported as :class:`Unreadable` (settled by
the channel), whatever it holds — never another exception out of the transport."""

from __future__ import annotations

import pytest

from celery_plus.transport.envelopes import Unreadable, read_envelope


@pytest.mark.parametrize("stored", ["\x00\ud800 a lone surrogate after the mark",
                                    b"\x00z9 a later layout", "\x00"])
def test_a_nul_led_message_goes_back_for_another_release(stored: str | bytes) -> None:
    with pytest.raises(Unreadable) as caught:
        read_envelope(stored)
    assert caught.value.give_back is True


@pytest.mark.parametrize("stored", ["\ud800 not json", b"\xff\xfe", "[" * 100_000, "[]",
                                    '{"properties": 1}'])
def test_anything_else_unreadable_is_a_dead_letter(stored: str | bytes) -> None:
    with pytest.raises(Unreadable) as caught:
        read_envelope(stored)
    assert caught.value.give_back is False


def test_a_kombu_envelope_is_read() -> None:
    assert read_envelope('{"properties": {}, "body": ""}') == {"properties": {}, "body": ""}
