"""Failure details are cleaned once before any store encodes them (issue #11 defect 2)."""

from __future__ import annotations

import json

from celery_plus.model.details import (
    TEXT_MAX,
    clean_detail,
    clean_text,
    encode_detail,
    exception_text,
)


def test_lone_surrogates_and_nul_are_kept_visible_as_escapes() -> None:
    assert clean_text("caf\udce9 \ud800!") == "caf\\udce9 \\ud800!"
    assert clean_text("a\x00b") == "a\\x00b"
    assert clean_text("é ok \U0001f600") == "é ok \U0001f600"
    clean_text("caf\udce9").encode("utf-8")  # encodable: no error


def test_over_long_text_keeps_its_head_and_names_its_length() -> None:
    text = clean_text("y" * (TEXT_MAX + 10))
    assert len(text) == TEXT_MAX
    assert text.startswith("y" * 1000)
    assert text.endswith(f"[truncated: {TEXT_MAX + 10} characters in all]")
    assert clean_text("z" * TEXT_MAX) == "z" * TEXT_MAX


def test_values_become_text_and_absent_values_stay_absent() -> None:
    detail = {"exc_type": 42, "exc_message": {"a": [1]}, "traceback": None, "flag": False,
              "ok": True, "k\x00": "v"}
    assert clean_detail(detail) == {"exc_type": "42", "exc_message": "{'a': [1]}",
                                    "ok": "true", "k\\x00": "v"}
    assert clean_detail(None) is None and clean_detail({}) is None
    assert detail["exc_type"] == 42, "the caller's detail was modified"


def test_the_encoded_detail_is_json_every_store_accepts() -> None:
    encoded = encode_detail({"exc_message": "\udce9\x00" + "x" * 100_000})
    assert encoded is not None and "\\u0000" not in encoded
    encoded.encode("utf-8")
    assert json.loads(encoded)["exc_message"].startswith("\\udce9\\x00x")
    assert encode_detail(None) is None


def test_an_exception_that_cannot_be_printed_still_has_a_text() -> None:
    class NoStr(ValueError):
        def __str__(self) -> str:
            raise RuntimeError("broken __str__")

    class NoText(NoStr):
        def __repr__(self) -> str:
            raise RuntimeError("broken __repr__")

    assert exception_text(ValueError("plain")) == "plain"
    assert exception_text(NoStr("x")) == "NoStr('x')"
    assert exception_text(NoText()) == "<NoText object: str() and repr() raised>"
