"""celery_plus.send.keys: canonical JSON, payload digest, unique keys, concurrency scopes."""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import uuid
from collections import OrderedDict

import pytest

from celery_plus.send.keys import canonical_json, concurrency_scope, payload_digest, unique_key

# --- canonical JSON: scalars -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (1, "1"),
        (-42, "-42"),
        (2**63 - 1, "9223372036854775807"),
        (2**64 - 1, "18446744073709551615"),
        (-(2**63), "-9223372036854775808"),
    ],
)
def test_scalars(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "true"),
        (False, "false"),
        ([True, 1, False, 0], "[true,1,false,0]"),
        ({"a": True, "b": 1}, '{"a":true,"b":1}'),
    ],
)
def test_bool_is_not_int(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


def test_bool_and_int_keys_differ() -> None:
    assert unique_key({"flag": True}, None) != unique_key({"flag": 1}, None)
    assert unique_key({"flag": False}, ["flag"]) == "flag=false"
    assert unique_key({"flag": 0}, ["flag"]) == "flag=0"


# --- canonical JSON: floats (ryu/serde layout) -------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, "1.0"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (100.0, "100.0"),
        (1e15, "1000000000000000.0"),
        (1234567890123456.0, "1234567890123456.0"),
        (1e16, "1e16"),
        (1.2345678901234568e16, "1.2345678901234568e16"),
        (1.5, "1.5"),
        (-2.5, "-2.5"),
        (123.456, "123.456"),
        (0.1, "0.1"),
        (0.0001, "0.0001"),
        (1e-5, "0.00001"),
        (0.000123, "0.000123"),
        (1e-6, "1e-6"),
        (1.5e-7, "1.5e-7"),
        (-1.5e-7, "-1.5e-7"),
        (1.2345e20, "1.2345e20"),
        (-1e100, "-1e100"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e308"),
    ],
)
def test_float_layout(value: float, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("value", [1e16, 1e-5, 1e-6, 1.5e-7, 1.2345e20, 1e100, 5e-324])
def test_float_layout_never_uses_plus_or_padded_exponent(value: float) -> None:
    text = canonical_json(value)
    assert "e+" not in text
    assert "e-0" not in text
    assert float(text) == value  # still round-trips


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_null(value: float) -> None:
    assert canonical_json(value) == "null"
    assert canonical_json([value]) == "[null]"


def test_float_and_int_differ() -> None:
    assert canonical_json(1.0) == "1.0"
    assert canonical_json(1) == "1"
    assert unique_key({"n": 1.0}, None) != unique_key({"n": 1}, None)


# --- canonical JSON: strings --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", '""'),
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("\b\t\n\f\r", '"\\b\\t\\n\\f\\r"'),
        ("\x00", '"\\u0000"'),
        ("\x01\x1f", '"\\u0001\\u001f"'),
        ("\x1b", '"\\u001b"'),  # lowercase hex
        ("\x0b", '"\\u000b"'),
        ("\x7f", '"\x7f"'),  # DEL is emitted raw
        ("a/b", '"a/b"'),  # slash is not escaped
        ("é", '"é"'),
        ("日本", '"日本"'),
        ("\u2028", '"\u2028"'),
        ("😀", '"😀"'),
    ],
)
def test_string_escapes(value: str, expected: str) -> None:
    assert canonical_json(value) == expected


def test_str_subclass_enum_is_a_string() -> None:
    class Color(str, enum.Enum):
        RED = "red"

    assert canonical_json(Color.RED) == '"red"'


def test_int_subclass_enum_is_an_int() -> None:
    class Level(enum.IntEnum):
        HIGH = 3

    assert canonical_json(Level.HIGH) == "3"


# --- canonical JSON: containers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({}, "{}"),
        ([], "[]"),
        ((), "[]"),
        ([3, 1, 2], "[3,1,2]"),
        ((1, "a", None), '[1,"a",null]'),
        ({"b": 1, "a": 2}, '{"a":2,"b":1}'),
        ({"x": 1, "y": {"b": 2, "a": [1, 2]}}, '{"x":1,"y":{"a":[1,2],"b":2}}'),
        ({"B": 1, "a": 2, "_": 3}, '{"B":1,"_":3,"a":2}'),  # code-point order
        ({"é": 1, "z": 2}, '{"z":2,"é":1}'),
        ({"\U0001f600": 1, "\uffff": 2}, '{"\uffff":2,"\U0001f600":1}'),
        ({"k\n": 1}, '{"k\\n":1}'),
        ([{"b": [], "a": {}}], '[{"a":{},"b":[]}]'),
    ],
)
def test_containers(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


def test_key_order_independence() -> None:
    a = {"x": 1, "y": {"b": 2, "a": [1, 2]}}
    b = {"y": {"a": [1, 2], "b": 2}, "x": 1}
    assert canonical_json(a) == canonical_json(b)
    assert unique_key(a, None) == unique_key(b, None) == args_key('{"x":1,"y":{"a":[1,2],"b":2}}')


def test_array_order_matters() -> None:
    assert canonical_json([1, 2]) != canonical_json([2, 1])


def test_other_mapping_types() -> None:
    assert canonical_json(OrderedDict([("b", 1), ("a", 2)])) == '{"a":2,"b":1}'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({1: "a"}, '{"1":"a"}'),
        ({True: 1}, '{"true":1}'),
        ({False: 1}, '{"false":1}'),
        ({None: 1}, '{"null":1}'),
        ({1.5: 1}, '{"1.5":1}'),
        ({10: 1, 9: 2}, '{"10":1,"9":2}'),  # sorted as strings
        ({"b": 1, 2: 2}, '{"2":2,"b":1}'),
    ],
)
def test_non_string_keys_follow_json_dumps(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


def test_colliding_keys_are_deterministic() -> None:
    assert canonical_json({1: "x", "1": "a"}) == canonical_json({"1": "a", 1: "x"})


def test_unsupported_key_type_raises() -> None:
    with pytest.raises(TypeError, match="tuple"):
        canonical_json({(1, 2): "x"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (datetime.datetime(2024, 1, 2, 3, 4, 5), '"2024-01-02T03:04:05"'),
        (
            datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc),
            '"2024-01-02T03:04:05.000006+00:00"',
        ),
        (datetime.date(2024, 1, 2), '"2024-01-02"'),
        (datetime.time(13, 14), '"13:14:00"'),
        (
            uuid.UUID("12345678-1234-5678-1234-567812345678"),
            '"12345678-1234-5678-1234-567812345678"',
        ),
        (decimal.Decimal("1.10"), '"1.10"'),
        ({3, 1, 2}, "[1,2,3]"),
        (frozenset({"b", "a"}), '["a","b"]'),
        ({10, 9}, "[10,9]"),  # sorted by canonical JSON text, not numerically
        (set(), "[]"),
    ],
)
def test_python_type_conversions(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("value", [object(), b"bytes", bytearray(b"x"), 1j, [1, object()]])
def test_unsupported_types_raise(value: object) -> None:
    with pytest.raises(TypeError, match="JSON-serialisable") as info:
        canonical_json(value)
    assert "unique/concurrency keys" in str(info.value)


def test_type_error_names_the_type() -> None:
    class Widget:
        pass

    with pytest.raises(TypeError, match="Widget"):
        canonical_json({"w": Widget()})


# --- payload digest: BLAKE2b-128 ---------------------------------------------------------


def blake2b_128(data: bytes) -> str:
    """The reference digest, straight from hashlib (independent of the module under test)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def args_key(canonical: str) -> str:
    """The whole-payload key of a payload whose canonical JSON is ``canonical``."""
    return "args:" + blake2b_128(canonical.encode("utf-8"))


@pytest.mark.parametrize("text", ["", "a", "{}", "null", '{"invoice_id":42}'])
def test_payload_digest_is_blake2b_128(text: str) -> None:
    assert payload_digest(text) == blake2b_128(text.encode())


def test_payload_digest_matches_coreutils_b2sum() -> None:
    # Digests from another implementation: printf '%s' TEXT | b2sum -l 128
    assert payload_digest("") == "cae66941d9efbd404e4d88758ea67670"
    assert unique_key({"invoice_id": 42}, None) == "args:da0c40d526d54f0d34cff1c839d3e7f6"


def test_payload_digest_hashes_utf8_bytes() -> None:
    # "é" is the two UTF-8 bytes C3 A9, not the single code point E9.
    assert payload_digest("é") == blake2b_128(b"\xc3\xa9")
    assert payload_digest("é") != blake2b_128(b"\xe9")


# --- unique key (seed §2.3, with BLAKE2b-128 for FNV-1a 64) ------------------------------


@pytest.mark.parametrize(
    ("payload", "canonical"),
    [
        ({}, "{}"),
        ({"invoice_id": 42}, '{"invoice_id":42}'),
        ({"x": 1, "y": {"b": 2, "a": [1, 2]}}, '{"x":1,"y":{"a":[1,2],"b":2}}'),
        ({"y": {"a": [1, 2], "b": 2}, "x": 1}, '{"x":1,"y":{"a":[1,2],"b":2}}'),
        ({"s": "café", "t": (1, 2.5)}, '{"s":"café","t":[1,2.5]}'),
        (None, "null"),
    ],
)
@pytest.mark.parametrize("by", [None, [], ()])
def test_unique_key_whole_payload(payload: object, by: list[str] | None, canonical: str) -> None:
    assert unique_key(payload, by) == args_key(canonical)


def test_unique_key_whole_payload_format() -> None:
    key = unique_key({"anything": [1, 2.5, "x"]}, None)
    assert key.startswith("args:")
    digest = key.removeprefix("args:")
    assert len(digest) == 32
    assert digest == digest.lower()
    int(digest, 16)


def test_equal_canonical_payloads_share_a_key() -> None:
    assert unique_key({"a": [1, 2], "b": {"d": 4, "c": 3}}, None) == unique_key(
        {"b": OrderedDict([("c", 3), ("d", 4)]), "a": (1, 2)}, None)
    assert unique_key({"s": {3, 1, 2}}, None) == unique_key({"s": [1, 2, 3]}, None)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"invoice_id": 42}, {"invoice_id": 43}),
        ({"invoice_id": 42}, {"invoice_id": "42"}),
        ({"a": [1, 2]}, {"a": [2, 1]}),
        ({"a": 1}, {"b": 1}),
        ({}, None),
        ({"a": "x" * 5000}, {"a": "x" * 4999 + "y"}),
    ],
)
def test_different_canonical_payloads_get_different_keys(one: object, other: object) -> None:
    assert canonical_json(one) != canonical_json(other)
    assert unique_key(one, None) != unique_key(other, None)


def test_the_key_is_not_the_seed_fnv_key() -> None:
    """The seed's FNV-1a 64 key of ``{}`` (seed §2.3 vector) is not what a publish sends now."""
    assert unique_key({}, None) != "args:08f44b07b5901a25"


@pytest.mark.parametrize(
    ("payload", "by", "expected"),
    [
        ({"account_id": 7, "other": "x"}, ["account_id"], "account_id=7"),
        ({"account_id": "a"}, ["account_id"], 'account_id="a"'),
        ({"a": 1}, ["a", "b"], "a=1\x1fb=null"),
        ({"b": 2, "a": 1}, ["b", "a"], "b=2\x1fa=1"),  # declared order
        ({}, ["account_id"], "account_id=null"),
        ({"other": True}, ["account_id"], "account_id=null"),
        ({"account_id": None}, ["account_id"], "account_id=null"),
        ({"account_id": 0}, ["account_id"], "account_id=0"),  # falsy values kept
        ({"account_id": ""}, ["account_id"], 'account_id=""'),
        ({"v": {"z": 1, "a": [2]}}, ["v"], 'v={"a":[2],"z":1}'),
        ({"v": 1e16}, ["v"], "v=1e16"),
        ("not-an-object", ["a", "b"], "a=null\x1fb=null"),
        ([1, 2], ["a"], "a=null"),
        (None, ["a"], "a=null"),
    ],
)
def test_unique_key_by_fields(payload: object, by: list[str], expected: str) -> None:
    assert unique_key(payload, by) == expected


def test_unique_key_missing_field_equals_null_field() -> None:
    assert unique_key({}, ["account_id"]) == unique_key({"other": True}, ["account_id"])


def test_unique_key_field_name_is_not_escaped() -> None:
    assert unique_key({'we"ird': 1}, ['we"ird']) == 'we"ird=1'


# --- concurrency scope (seed §2.4) -------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "key", "expected"),
    [
        ({"account": "acct-9"}, None, None),
        ({"account": "acct-9"}, "account", '"acct-9"'),
        ({"account": 9}, "account", "9"),
        ({"account": None}, "account", "null"),
        ({}, "account", "null"),
        ({"account": {"b": 1, "a": 2}}, "account", '{"a":2,"b":1}'),
        ({"account": False}, "account", "false"),
        ("scalar", "account", "null"),
        (None, None, None),
    ],
)
def test_concurrency_scope(payload: object, key: str | None, expected: str | None) -> None:
    assert concurrency_scope(payload, key) == expected


def test_a_lone_surrogate_in_an_argument_is_an_escape_in_the_key() -> None:
    """Keys are always valid UTF-8 (every store accepts them), and distinct per value."""
    key = unique_key({"name": "caf\udce9.txt", "n": 1}, ["name", "n"])
    assert key == 'name="caf\\udce9.txt"\x1fn=1'
    key.encode("utf-8")
    assert canonical_json(["\ud800", "\udfff"]) == '["\\ud800","\\udfff"]'
    assert unique_key({"a": "\udce9"}, ["a"]) != unique_key({"a": "\\udce9"}, ["a"])
