"""celery_plus.send.options: option parsing/validation, payload binding, message headers."""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping
from typing import Any

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus.send.options import (
    EXTENSION_OPTIONS,
    UNIQUE_WINDOWS,
    PayloadBinder,
    TaskExtensions,
    check_option_names,
    message_extensions,
    parse_extensions,
)


def charge(customer_id: int, amount: float = 0.0, *, currency: str = "EUR") -> None:
    """Plain (unbound) task function."""


def bound_charge(self: Any, customer_id: int, amount: float = 0.0) -> None:
    """Bound task function (``self`` is the task)."""


def flexible(url: str, **extra: object) -> None:
    """Accepts arbitrary keyword arguments."""


def variadic(first: int, *rest: int, flag: bool = False, **opts: object) -> None:
    """Has *args and **kwargs."""


def parse(options: Mapping[str, object], fun: Any = charge, bound: bool = False) -> TaskExtensions:
    return parse_extensions(fun, options, bound=bound, task_name="billing.charge")


# --- constants ---------------------------------------------------------------------------


def test_constants() -> None:
    assert (
        frozenset(
            {
                "unique",
                "unique_by",
                "unique_window",
                "unique_ttl",
                "unique_on_duplicate",
                "concurrency",
                "concurrency_key",
                "max_deliveries",
                "rate_limit_scope",
                "rate_limit_key",
            }
        )
        == EXTENSION_OPTIONS
    )
    assert UNIQUE_WINDOWS == ("pending", "running", "ttl")


# --- defaults and implications -----------------------------------------------------------


def test_no_options_is_empty() -> None:
    ext = parse({"bind": False, "name": "x", "acks_late": True})  # non-extension keys ignored
    assert ext.is_empty
    assert not ext.needs_late_ack
    assert ext == TaskExtensions(
        unique=False,
        unique_by=(),
        unique_window=None,
        unique_ttl=None,
        unique_on_duplicate="return",
        concurrency=None,
        concurrency_key=None,
        max_deliveries=None,
    )


def test_none_values_count_as_not_given() -> None:
    ext = parse({"unique": None, "unique_by": None, "concurrency": None, "max_deliveries": None})
    assert ext.is_empty


def test_unique_true_defaults() -> None:
    ext = parse({"unique": True})
    assert ext.unique
    assert ext.unique_by == ()
    assert ext.unique_window == "running"
    assert ext.unique_ttl is None
    assert ext.unique_on_duplicate == "return"
    assert ext.needs_late_ack
    assert not ext.is_empty


def test_unique_by_implies_unique() -> None:
    ext = parse({"unique_by": ["customer_id"], "unique_window": "pending"})
    assert ext.unique
    assert ext.unique_by == ("customer_id",)
    assert ext.unique_window == "pending"
    assert not ext.needs_late_ack


def test_unique_by_single_string_is_one_field() -> None:
    assert parse({"unique_by": "customer_id"}).unique_by == ("customer_id",)


def test_unique_by_tuple_keeps_declared_order() -> None:
    ext = parse({"unique_by": ("amount", "customer_id")})
    assert ext.unique_by == ("amount", "customer_id")


def test_unique_by_accepts_keyword_only_parameter() -> None:
    assert parse({"unique_by": ["currency"]}).unique_by == ("currency",)


@pytest.mark.parametrize(
    ("ttl", "seconds"),
    [(300, 300.0), (2.5, 2.5), (datetime.timedelta(minutes=5), 300.0), (0.001, 0.001)],
)
def test_unique_ttl_implies_ttl_window(ttl: object, seconds: float) -> None:
    ext = parse({"unique_by": ["customer_id"], "unique_ttl": ttl})
    assert ext.unique
    assert ext.unique_window == "ttl"
    assert ext.unique_ttl == seconds
    assert not ext.needs_late_ack


def test_unique_ttl_alone_implies_unique() -> None:
    ext = parse({"unique_ttl": 10})
    assert ext.unique and ext.unique_by == () and ext.unique_window == "ttl"


def test_explicit_ttl_window_with_ttl() -> None:
    assert parse({"unique_ttl": 10, "unique_window": "ttl"}).unique_window == "ttl"


def test_unique_on_duplicate_raise() -> None:
    assert parse({"unique": True, "unique_on_duplicate": "raise"}).unique_on_duplicate == "raise"


def test_concurrency() -> None:
    ext = parse({"concurrency": 2})
    assert ext.concurrency == 2
    assert ext.concurrency_key is None
    assert ext.needs_late_ack
    assert not ext.unique
    assert not ext.is_empty


def test_concurrency_key() -> None:
    ext = parse({"concurrency": 1, "concurrency_key": "customer_id"})
    assert (ext.concurrency, ext.concurrency_key) == (1, "customer_id")


def test_max_deliveries() -> None:
    ext = parse({"max_deliveries": 5})
    assert ext.max_deliveries == 5
    assert not ext.is_empty
    assert not ext.needs_late_ack


def test_unique_false_alone_is_not_unique() -> None:
    ext = parse({"unique": False})
    assert not ext.unique and ext.unique_window is None and ext.is_empty


def test_bound_task_parameters() -> None:
    ext = parse({"unique_by": ["customer_id"]}, fun=bound_charge, bound=True)
    assert ext.unique_by == ("customer_id",)


def test_kwargs_function_accepts_any_field() -> None:
    ext = parse({"unique_by": ["tenant"], "concurrency": 1, "concurrency_key": "region"}, flexible)
    assert ext.unique_by == ("tenant",)
    assert ext.concurrency_key == "region"
    assert ext.var_keyword == "extra"


def test_parameters_of_var_kinds_are_valid_names() -> None:
    assert parse({"unique_by": ["rest", "opts"]}, variadic).unique_by == ("rest", "opts")


def test_options_mapping_is_not_mutated() -> None:
    options = {"unique_by": ["customer_id"], "queue": "q"}
    parse(options)
    assert options == {"unique_by": ["customer_id"], "queue": "q"}


# --- validation errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "option", "fragment"),
    [
        ({"unique": "yes"}, "unique", "True or False"),
        ({"unique": 1}, "unique", "True or False"),
        ({"unique": False, "unique_by": ["customer_id"]}, "unique_by", "unique=False"),
        ({"unique": False, "unique_ttl": 5}, "unique_ttl", "unique=False"),
        ({"unique": False, "unique_window": "pending"}, "unique_window", "unique=False"),
        ({"unique_window": "pending"}, "unique_window", "unique tasks"),
        ({"unique_on_duplicate": "raise"}, "unique_on_duplicate", "unique tasks"),
        ({"unique": True, "unique_window": "forever"}, "unique_window", "'pending'"),
        ({"unique": True, "unique_window": 3}, "unique_window", "unknown window"),
        ({"unique": True, "unique_window": "ttl"}, "unique_window", "unique_ttl"),
        ({"unique_ttl": 5, "unique_window": "running"}, "unique_window", "'ttl'"),
        ({"unique_ttl": 5, "unique_window": "pending"}, "unique_window", "'ttl'"),
        ({"unique_ttl": 0}, "unique_ttl", "positive"),
        ({"unique_ttl": -1}, "unique_ttl", "positive"),
        ({"unique_ttl": 0.0001}, "unique_ttl", "1 ms"),
        ({"unique_ttl": float("inf")}, "unique_ttl", "finite"),
        ({"unique_ttl": float("nan")}, "unique_ttl", "finite"),
        ({"unique_ttl": datetime.timedelta(0)}, "unique_ttl", "positive"),
        ({"unique_ttl": datetime.timedelta(seconds=-3)}, "unique_ttl", "positive"),
        ({"unique_ttl": "300"}, "unique_ttl", "seconds"),
        ({"unique_ttl": True}, "unique_ttl", "seconds"),
        ({"unique_by": []}, "unique_by", "non-empty"),
        ({"unique_by": ()}, "unique_by", "non-empty"),
        ({"unique_by": {"customer_id"}}, "unique_by", "list"),
        ({"unique_by": 5}, "unique_by", "list"),
        ({"unique_by": [5]}, "unique_by", "strings"),
        ({"unique_by": [""]}, "unique_by", "strings"),
        ({"unique_by": ["customer"]}, "unique_by", "no parameter named 'customer'"),
        ({"unique_by": ["customer_id", "customer_id"]}, "unique_by", "more than once"),
        ({"unique": True, "unique_on_duplicate": "ignore"}, "unique_on_duplicate", "'raise'"),
        ({"concurrency": 0}, "concurrency", ">= 1"),
        ({"concurrency": -2}, "concurrency", ">= 1"),
        ({"concurrency": 1.5}, "concurrency", "integer"),
        ({"concurrency": "2"}, "concurrency", "integer"),
        ({"concurrency": True}, "concurrency", "integer"),
        ({"concurrency_key": "customer_id"}, "concurrency_key", "requires concurrency"),
        ({"concurrency": 1, "concurrency_key": "nope"}, "concurrency_key", "'nope'"),
        ({"concurrency": 1, "concurrency_key": 3}, "concurrency_key", "strings"),
        ({"concurrency": 1, "concurrency_key": ["customer_id"]}, "concurrency_key", "strings"),
        ({"max_deliveries": 0}, "max_deliveries", ">= 1"),
        ({"max_deliveries": 2.0}, "max_deliveries", "integer"),
        ({"max_deliveries": False}, "max_deliveries", "integer"),
    ],
)
def test_validation_errors(options: dict[str, object], option: str, fragment: str) -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        parse(options)
    message = str(info.value)
    assert "billing.charge" in message  # names the task
    assert f"{option}=" in message  # names the option (and its value)
    assert fragment in message
    assert "Fix:" in message


def test_error_message_shows_bad_value() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"unique_window='forever'"):
        parse({"unique": True, "unique_window": "forever"})


def test_unknown_window_lists_valid_windows() -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        parse({"unique": True, "unique_window": "forever"})
    for window in UNIQUE_WINDOWS:
        assert repr(window) in str(info.value)


def test_unknown_field_lists_parameters() -> None:
    with pytest.raises(ImproperlyConfigured, match="customer_id, amount, currency"):
        parse({"unique_by": ["bogus"]})


def test_bound_self_is_not_a_valid_field() -> None:
    with pytest.raises(ImproperlyConfigured, match="'self'"):
        parse({"unique_by": ["self"]}, fun=bound_charge, bound=True)
    with pytest.raises(ImproperlyConfigured, match="concurrency_key"):
        parse({"concurrency": 1, "concurrency_key": "self"}, fun=bound_charge, bound=True)


def test_unbound_first_parameter_is_valid_field() -> None:
    assert parse({"unique_by": ["self"]}, fun=bound_charge, bound=False).unique_by == ("self",)


def test_uninspectable_function_with_fields() -> None:
    with pytest.raises(ImproperlyConfigured, match="cannot be inspected"):
        parse({"unique_by": ["x"]}, fun=max)


# --- payload binding ---------------------------------------------------------------------


def test_positional_and_keyword_calls_bind_equally() -> None:
    binder = PayloadBinder(charge)
    expected = {"customer_id": 1, "amount": 2.0, "currency": "EUR"}
    assert binder.bind((1,), {"amount": 2.0}) == expected
    assert binder.bind((), {"customer_id": 1, "amount": 2.0}) == expected
    assert binder.bind((1, 2.0), {}) == expected


def test_defaults_are_applied() -> None:
    assert PayloadBinder(charge).bind([7], None) == {
        "customer_id": 7,
        "amount": 0.0,
        "currency": "EUR",
    }


def test_bind_keeps_signature_order() -> None:
    payload = PayloadBinder(charge).bind((), {"currency": "USD", "customer_id": 1})
    assert list(payload) == ["customer_id", "amount", "currency"]


def test_var_positional_and_var_keyword() -> None:
    payload = PayloadBinder(variadic).bind((1, 2, 3), {"flag": True, "x": "y"})
    assert payload == {"first": 1, "rest": [2, 3], "flag": True, "opts": {"x": "y"}}
    empty = PayloadBinder(variadic).bind((1,), {})
    assert empty == {"first": 1, "rest": [], "flag": False, "opts": {}}


def test_bound_task_drops_self() -> None:
    binder = PayloadBinder(bound_charge, bound=True)
    assert binder.bind((5,), {}) == {"customer_id": 5, "amount": 0.0}
    assert binder.bind((), {"customer_id": 5}) == binder.bind((5,), {})


def test_bound_var_positional_only_keeps_args() -> None:
    def anything(*args: object) -> None: ...

    assert PayloadBinder(anything, bound=True).bind((1, 2), {}) == {"args": [1, 2]}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),  # missing required
        ((1, 2.0, 3), {}),  # too many positional
        ((1,), {"customer_id": 1}),  # duplicate
        ((1,), {"unknown": 1}),  # unexpected keyword
    ],
)
def test_binding_errors_name_the_task(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    binder = PayloadBinder(charge, task_name="billing.charge")
    with pytest.raises(TypeError, match=r"billing\.charge"):
        binder.bind(args, kwargs)


def test_binding_error_for_bound_task() -> None:
    with pytest.raises(TypeError, match=r"my\.task"):
        PayloadBinder(bound_charge, bound=True, task_name="my.task").bind((1, 2, 3), {})


def test_uninspectable_callable_binds_args_and_kwargs() -> None:
    assert PayloadBinder(max).bind((1,), {"a": 2}) == {"args": [1], "kwargs": {"a": 2}}


# --- message extensions ------------------------------------------------------------------


def test_message_extensions_empty() -> None:
    assert message_extensions(TaskExtensions(), "t", {"invoice_id": 42}) == {}


def args_key(task: str, canonical: str) -> str:
    """The whole-payload key of ``task``: BLAKE2b-128 of the canonical JSON, via hashlib."""
    return f"{task}:args:" + hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


@pytest.mark.parametrize(
    ("payload", "canonical"),
    [
        ({"invoice_id": 42}, '{"invoice_id":42}'),
        ({}, "{}"),
        ({"y": {"b": 2, "a": [1, 2]}, "x": 1}, '{"x":1,"y":{"a":[1,2],"b":2}}'),
    ],
)
def test_message_extensions_whole_payload(payload: dict[str, object], canonical: str) -> None:
    ext = TaskExtensions(unique=True, unique_window="running")
    assert message_extensions(ext, "t", payload) == {
        "u": [args_key("t", canonical), "running", 0]}


def test_message_extensions_unique_by_pending() -> None:
    def create(account_id: int, b: object = None) -> None: ...

    ext = parse_extensions(
        create,
        {"unique_by": ["account_id", "b"], "unique_window": "pending"},
        bound=False,
        task_name="acct.create",
    )
    payload = PayloadBinder(create).bind((7,), {})
    assert message_extensions(ext, "acct.create", payload) == {
        "u": ["acct.create:account_id=7\x1fb=null", "pending", 0]
    }


def test_message_extensions_string_field() -> None:
    ext = TaskExtensions(unique=True, unique_by=("account_id",), unique_window="running")
    header = message_extensions(ext, "t", {"account_id": "a"})
    assert header == {"u": ['t:account_id="a"', "running", 0]}


@pytest.mark.parametrize(("ttl", "ttl_ms"), [(300, 300_000), (2.5, 2500), (0.0015, 2)])
def test_message_extensions_ttl(ttl: float, ttl_ms: int) -> None:
    ext = parse({"unique_by": ["customer_id"], "unique_ttl": ttl})
    header = message_extensions(ext, "billing.charge", {"customer_id": 9, "amount": 1.0})
    assert header == {"u": ["billing.charge:customer_id=9", "ttl", ttl_ms]}


def test_message_extensions_ttl_timedelta() -> None:
    ext = parse({"unique_ttl": datetime.timedelta(minutes=1)})
    header = message_extensions(ext, "t", {})
    assert header == {"u": [args_key("t", "{}"), "ttl", 60_000]}


def test_message_extensions_unscoped_concurrency() -> None:
    ext = parse({"concurrency": 2})
    assert message_extensions(ext, "recalculate", {"customer_id": 1}) == {"c": ["recalculate:", 2]}


@pytest.mark.parametrize(
    ("value", "scope"),
    [("acct-9", '"acct-9"'), (42, "42"), (None, "null"), ({"b": 1, "a": 2}, '{"a":2,"b":1}')],
)
def test_message_extensions_scoped_concurrency(value: object, scope: str) -> None:
    ext = parse({"concurrency": 1, "concurrency_key": "customer_id"})
    header = message_extensions(ext, "t", {"customer_id": value})
    assert header == {"c": [f"t:{scope}", 1]}


def test_message_extensions_missing_concurrency_field_is_null() -> None:
    ext = TaskExtensions(concurrency=3, concurrency_key="customer_id")
    assert message_extensions(ext, "t", {}) == {"c": ["t:null", 3]}


def test_message_extensions_max_deliveries() -> None:
    assert message_extensions(parse({"max_deliveries": 5}), "t", {}) == {"md": 5}


def test_message_extensions_all_kinds() -> None:
    ext = parse(
        {
            "unique": True,
            "unique_on_duplicate": "raise",
            "concurrency": 1,
            "concurrency_key": "customer_id",
            "max_deliveries": 3,
        }
    )
    header = message_extensions(ext, "t", {"invoice_id": 42})
    assert header == {
        "u": [args_key("t", '{"invoice_id":42}'), "running", 0],
        "c": ["t:null", 1],
        "md": 3,
    }


def test_message_extensions_fields_from_var_keyword() -> None:
    ext = parse_extensions(
        flexible,
        {"unique_by": ["tenant"], "concurrency": 1, "concurrency_key": "region"},
        bound=False,
        task_name="crawl",
    )
    binder = PayloadBinder(flexible)
    payload = binder.bind(("https://x",), {"tenant": "acme", "region": "eu"})
    assert payload == {"url": "https://x", "extra": {"tenant": "acme", "region": "eu"}}
    assert message_extensions(ext, "crawl", payload) == {
        "u": ['crawl:tenant="acme"', "running", 0],
        "c": ['crawl:"eu"', 1],
    }
    missing = message_extensions(ext, "crawl", binder.bind(("https://x",), {}))
    assert missing == {"u": ["crawl:tenant=null", "running", 0], "c": ["crawl:null", 1]}


def test_positional_and_keyword_calls_share_unique_key() -> None:
    ext = parse({"unique": True})
    binder = PayloadBinder(charge)
    a = message_extensions(ext, "t", binder.bind((1,), {"amount": 2.0}))
    b = message_extensions(ext, "t", binder.bind((), {"amount": 2.0, "customer_id": 1}))
    c = message_extensions(ext, "t", binder.bind((2,), {"amount": 2.0}))
    assert a == b
    assert a != c



# -- cluster rate limits (docs/rate-limits.md) ----------------------------------------------
def test_celery_rate_strings_become_starts_per_window() -> None:
    from celery_plus.send.options import parse_rate

    assert parse_rate("t", "60/m") == (60, 60_000)
    assert parse_rate("t", "10/s") == (10, 1_000)
    assert parse_rate("t", "100/h") == (100, 3_600_000)
    assert parse_rate("t", 5) == (5, 1_000)
    assert parse_rate("t", "0.5/s") == (1, 2_000)
    assert parse_rate("t", " 100 / m ") == (100, 60_000)
    for bad in ("fast", "10/d", "0/m", "-1/s", True, "1.5/s", None,
                # Not Celery's units (Celery refuses them too): not "per minute".
                "10/ms", "10/sec", "10/min",
                # Beyond the stores' integers.
                "1e30/s", "1e-300/s"):
        with pytest.raises(ImproperlyConfigured, match="rate_limit"):
            parse_rate("t", bad)
    for no_limit in ("0", 0, "0/m"):  # Celery's "no limit" is not a cluster rate
        with pytest.raises(ImproperlyConfigured, match="no limit"):
            parse_rate("t", no_limit)


def test_a_cluster_scoped_rate_limit_is_the_stores_not_celerys_per_worker_bucket() -> None:
    from celery_plus import Celery
    from celery_plus.send.options import message_extensions

    app = Celery("rates", broker="memory://", set_as_current=False)

    @app.task(rate_limit="60/m", rate_limit_scope="cluster")
    def cluster(x: int) -> None: ...

    @app.task(rate_limit="10/s", rate_limit_key="customer")
    def keyed(customer: str, n: int) -> None: ...

    @app.task(rate_limit="10/s")
    def per_worker(x: int) -> None: ...

    @app.task(rate_limit="10/s", rate_limit_scope="worker")
    def explicit_worker(x: int) -> None: ...

    assert cluster.rate_limit is None and cluster.plus_rate_limit == "60/m"
    assert (cluster.plus_extensions.rate_limit, cluster.plus_extensions.rate_window_ms) == (
        60, 60_000)
    assert message_extensions(cluster.plus_extensions, cluster.name, {"x": 1}) == {
        "r": [f"{cluster.name}:", 60, 60_000]}
    assert message_extensions(keyed.plus_extensions, keyed.name,
                              {"customer": "acme", "n": 1}) == {
        "r": [f'{keyed.name}:"acme"', 10, 1_000]}
    # Celery's own meaning stays unless the cluster scope is asked for.
    assert per_worker.rate_limit == "10/s" and per_worker.plus_extensions is None
    assert explicit_worker.rate_limit == "10/s" and explicit_worker.plus_extensions is None


@pytest.mark.parametrize("options, fragment", [
    ({"rate_limit_scope": "cluster"}, "needs a rate_limit"),
    ({"rate_limit": "5/s", "rate_limit_scope": "everywhere"}, "must be one of"),
    ({"rate_limit": "5/s", "rate_limit_key": "nope"}, "no parameter named 'nope'"),
    ({"rate_limit": "5/s", "rate_limit_key": "x", "rate_limit_scope": "worker"},
     "needs the cluster scope"),
    ({"rate_limit": "often", "rate_limit_scope": "cluster"}, "is not a rate"),
])
def test_rate_limit_options_fail_at_decoration(options: dict[str, object],
                                               fragment: str) -> None:
    from celery_plus import Celery

    app = Celery("rates", broker="memory://", set_as_current=False)
    with pytest.raises(ImproperlyConfigured, match=fragment):
        @app.task(**options)
        def task(x: int) -> None: ...


@pytest.mark.parametrize("options, written, meant", [
    ({"rate_limit": "60/m", "rate_limit_scop": "cluster"}, "rate_limit_scop", "rate_limit_scope"),
    ({"rate_limit": "60/m", "rate_limit_keys": "x"}, "rate_limit_keys", "rate_limit_key"),
    ({"concurency": 2}, "concurency", "concurrency"),
    ({"max_delivery": 3}, "max_delivery", "max_deliveries"),
])
def test_a_misspelt_option_fails_at_decoration(options: dict[str, object], written: str,
                                               meant: str) -> None:
    # Celery keeps any unknown option as a task attribute: a misspelt rate_limit_scope would
    # leave Celery's per-worker limit in place, the limit times the processes, silently.
    from celery_plus import Celery

    app = Celery("rates", broker="memory://", set_as_current=False)
    with pytest.raises(ImproperlyConfigured, match=f"invalid {written}=.*write {meant}="):
        @app.task(**options)
        def task(x: int) -> None: ...


def test_options_of_celery_and_a_users_own_attributes_are_left_alone() -> None:
    from celery_plus import Celery

    app = Celery("rates", broker="memory://", set_as_current=False)

    @app.task(rate_limit="5/s", acks_late=True, max_retries=3, customer_tier="gold")
    def task(x: int) -> None: ...

    assert task.customer_tier == "gold" and task.rate_limit == "5/s"


def test_a_misspelt_option_of_a_task_class_fails_when_the_class_is_made() -> None:
    from celery_plus.task import Task

    with pytest.raises(ImproperlyConfigured, match=r"invalid rate_limit_scop=.*rate_limit_scope="):
        class Limited(Task):
            rate_limit = "60/m"
            rate_limit_scop = "cluster"

            def run(self, x: int) -> None: ...


def test_checking_a_tasks_attributes_never_binds_celerys_base_task(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Celery makes every task class with an ``app`` attribute; reading ``celery.Task.app``
    would bind Celery's base ``Task`` to the current app and copy its ``task_acks_late``
    onto every task made afterwards (the contrib fixtures' tasks lost ``acks_late=True``,
    and with it their concurrency slots while they ran)."""
    import celery

    monkeypatch.setattr(celery.Task, "_app", None)
    monkeypatch.setattr(celery.Task, "__bound__", False)
    check_option_names("t", {"app": object(), "acks_late": True, "typing": True})
    assert celery.Task._app is None and celery.Task.__bound__ is False
