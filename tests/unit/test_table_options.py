"""``storage_options`` in vane's spelling become each table format library's own
(``vane/io/tables/options.py``): the names, the endpoint from ``AWS_ENDPOINT_URL``, the
``allow_http`` object_store needs for an ``http://`` endpoint, a region always stated behind an
endpoint, and the library's own names passed through unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import vane
from vane.errors import ConfigurationError
from vane.io.storage import options_for
from vane.io.tables.options import in_vane_spelling, library_options

_VALUES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
# vane's names (several spellings of each), and the key each library gets
_SPELLINGS = {
    "key": ("aws_access_key_id", "s3.access-key-id"),
    "aws_access_key_id": ("aws_access_key_id", "s3.access-key-id"),
    "secret": ("aws_secret_access_key", "s3.secret-access-key"),
    "token": ("aws_session_token", "s3.session-token"),
    "region_name": ("aws_region", "s3.region"),
    "region": ("aws_region", "s3.region"),
}


@pytest.fixture(autouse=True)
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


@given(
    chosen=st.dictionaries(st.sampled_from(sorted(_SPELLINGS)), _VALUES, min_size=1),
    library=st.sampled_from(["lance", "delta", "iceberg"]),
)
def test_each_vane_name_becomes_the_librarys(chosen: dict[str, str], library: str) -> None:
    if {"region", "region_name"} <= set(chosen) or {"key", "aws_access_key_id"} <= set(chosen):
        return  # two spellings of one option: either may win
    got = library_options("write_x", "s3://b/t", chosen, library)  # type: ignore[arg-type]
    column = 1 if library == "iceberg" else 0
    assert got == {_SPELLINGS[name][column]: value for name, value in chosen.items()}


def test_an_http_endpoint_from_the_environment_reaches_every_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert library_options("read_lance", "s3://b/t.lance", None, "lance") == {
        "aws_endpoint": "http://127.0.0.1:9000",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert library_options("read_iceberg", "s3://b/wh", {"anon": True}, "iceberg") == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.region": "eu-west-1",
        "s3.anonymous": "true",
    }
    given_endpoint = {"endpoint_url": "https://minio:9000", "request_timeout": 5}
    assert library_options("x", "s3://b/t", given_endpoint, "delta") == {
        "aws_endpoint": "https://minio:9000",
        "aws_region": "eu-west-1",
        "timeout": "5s",
    }


def test_configured_options_apply_and_the_librarys_own_names_pass_through() -> None:
    vane.configure(storage_options={"s3": {"endpoint_url": "http://h:1", "max_attempts": 3}})
    try:
        got = library_options("x", "s3://b/t", {"aws_conditional_put": "etag"}, "delta")
    finally:
        vane.configure(storage_options={})
    assert got == {
        "aws_endpoint": "http://h:1",
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_conditional_put": "etag",
    }


def test_other_places_get_the_options_as_given() -> None:
    assert library_options("x", "gs://b/t", {"token": "t"}, "lance") == {"token": "t"}
    assert library_options("x", "/tmp/t", None, "delta") is None
    assert library_options("x", None, {"s3.endpoint": "http://h"}, "iceberg") == {
        "s3.endpoint": "http://h"
    }
    with pytest.raises(ConfigurationError, match="storage_options= takes a dict"):
        library_options("write_lance", "s3://b/t", ["key"], "lance")  # type: ignore[arg-type]


@given(
    chosen=st.fixed_dictionaries(
        {"key": _VALUES, "secret": _VALUES, "region": _VALUES},
        optional={
            "token": _VALUES,
            "endpoint_url": st.sampled_from(["http://127.0.0.1:9000", "https://minio:9000"]),
            "request_timeout": st.integers(1, 600) | st.floats(0.001, 600),
            "connect_timeout": st.integers(1, 600) | st.floats(0.001, 600),
            "anon": st.just(True),
        },
    ),
    case=st.sampled_from([str.lower, str.upper]),
)
def test_delta_rs_spelling_reads_back_as_vanes(chosen: dict[str, object], case) -> None:
    """Options as delta-rs and Lance take them (object_store's names, in any case) say to
    vane's own S3 filesystem what vane's spelling says: so a Delta table's files are read by
    Arrow's filesystem (no Python on Arrow's threads) whichever spelling a user brought."""
    theirs = library_options("x", "s3://b/t", chosen, "delta") or {}
    back = in_vane_spelling("x", {case(name): value for name, value in theirs.items()})
    assert back is not None
    assert options_for("s3", back, "x") == options_for("s3", chosen, "x")


def test_an_option_vanes_filesystem_cannot_take_leaves_the_read_to_the_library() -> None:
    assert (
        in_vane_spelling("x", {"aws_endpoint": "http://h:1", "aws_proxy_url": "http://p"}) is None
    )
    assert in_vane_spelling("x", {"timeout": "soon"}) is None
    assert in_vane_spelling("x", {"AWS_ALLOW_HTTP": "true", "aws_conditional_put": "etag"}) == {}
    assert in_vane_spelling("x", {"timeout": "500ms", "connect_timeout": "1m"}) == {
        "request_timeout": 0.5,
        "connect_timeout": 60.0,
    }
    assert in_vane_spelling("x", {"request_timeout": "30"}) == {"request_timeout": 30.0}
    # a flag in any spelling of true or false; one that is neither is the library's to refuse
    # (it was read as false: anonymous access silently off)
    assert in_vane_spelling("x", {"AWS_SKIP_SIGNATURE": "False"}) == {"anonymous": False}
    assert in_vane_spelling("x", {"aws_skip_signature": " ON "}) == {"anonymous": True}
    assert in_vane_spelling("x", {"aws_skip_signature": "maybe"}) is None


@pytest.mark.parametrize(
    "given",
    [
        {"endpoint_url": "http://a:1", "aws_endpoint": "http://b:2"},
        {"key": "K1", "AWS_ACCESS_KEY_ID": "K2"},
        {"aws_region": "eu-west-1", "AWS_REGION": "us-east-1"},
    ],
)
def test_one_option_said_twice_otherwise_is_refused_by_both_readers(given) -> None:
    """The library and vane's own filesystem must not each take another endpoint or key."""
    with pytest.raises(ConfigurationError, match="twice"):
        library_options("read_deltalake", "s3://b/t", given, "delta")
    with pytest.raises(ConfigurationError, match="twice"):
        in_vane_spelling("read_deltalake", given)
    same = {k: next(iter(given.values())) for k in given}  # the same value twice: fine
    assert in_vane_spelling("read_deltalake", same) is not None


@pytest.mark.parametrize("library", ["lance", "delta", "iceberg"])
def test_timeouts_as_object_store_writes_them_are_taken(library) -> None:
    got = library_options(
        "x", "s3://b/t", {"connect_timeout": "10s", "request_timeout": "30"}, library
    )
    assert got is not None and sorted(got.values()) == (
        ["10", "30"] if library == "iceberg" else ["10s", "30s"]
    )
    with pytest.raises(ConfigurationError, match="not a time"):
        library_options("x", "s3://b/t", {"connect_timeout": "soon"}, library)
