"""What a model is sent for each row's value (vane/ai/inputs.py), for Arrow arrays of every
type pyarrow's own test strategies generate: a text or a reason for every non-null value, never
an exception; text as it is, binary as its UTF-8 text, nested values as JSON."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vane.ai.inputs import texts

pst = pytest.importorskip("pyarrow.tests.strategies")


def _generated(kind: pa.DataType) -> bool:
    """Whether pyarrow's strategies make values of ``kind`` (they skip the test for a timestamp
    without a zone, and reject decimals)."""
    if pa.types.is_timestamp(kind):
        return kind.tz is not None
    if pa.types.is_decimal(kind):
        return False
    return all(_generated(kind.field(i).type) for i in range(kind.num_fields))


@settings(max_examples=300, deadline=None)
@given(array=pst.arrays(pst.all_types.filter(_generated), size=st.integers(0, 6)))
def test_every_value_of_every_type_has_a_text_or_a_reason(array):
    rendered, errors = texts(array)
    assert len(rendered) == len(errors) == len(array)
    for value, text, error in zip(array.to_pylist(), rendered, errors, strict=True):
        if value is None:
            assert text is None and error is None
        else:
            assert (text is None) != (error is None)
            assert text is None or isinstance(text, str)
    if pa.types.is_struct(array.type) or pa.types.is_list(array.type):
        for text in rendered:
            if text is not None:
                json.loads(text)  # nested values are JSON


@given(values=st.lists(st.none() | st.text(), max_size=8))
def test_text_is_sent_as_it_is(values):
    assert texts(pa.array(values, pa.string())) == (values, [None] * len(values))
    assert texts(pa.array(values, pa.large_string()).dictionary_encode())[0] == values


@given(values=st.lists(st.none() | st.binary(max_size=8), max_size=8))
def test_binary_is_its_utf8_text_or_its_rows_reason(values):
    rendered, errors = texts(pa.array(values, pa.binary()))
    for value, text, error in zip(values, rendered, errors, strict=True):
        try:
            decoded = None if value is None else value.decode("utf-8")
        except UnicodeDecodeError:
            assert text is None and "is not UTF-8 text" in str(error)
        else:
            assert text == decoded and error is None


@given(values=st.lists(st.none() | st.lists(st.none() | st.binary(max_size=3)), max_size=5))
def test_a_list_fails_with_any_of_its_values(values):
    rendered, errors = texts(pa.array(values, pa.list_(pa.binary())))
    for value, text, error in zip(values, rendered, errors, strict=True):
        if value is None:
            continue
        try:
            items = [None if v is None else v.decode("utf-8") for v in value]
        except UnicodeDecodeError:
            assert text is None and error is not None
        else:
            assert json.loads(text) == items


def test_durations_and_intervals_are_iso_8601():
    durations = pa.array(
        [dt.timedelta(days=1, hours=2), dt.timedelta(0), dt.timedelta(seconds=-90.5), None],
        pa.duration("us"),
    )
    assert texts(durations)[0] == ["PT26H", "PT0S", "-PT1M30.5S", None]
    assert texts(pa.array([5], pa.duration("ns")))[0] == ["PT0.000000005S"]
    intervals = pa.array(
        [pa.MonthDayNano([1, 2, 3 * 10**9]), pa.MonthDayNano([-1, -2, 0]), None],
        pa.month_day_nano_interval(),
    )
    assert texts(intervals)[0] == ["P1M2DT3S", "-P1M2D", None]
