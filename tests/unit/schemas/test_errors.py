"""``unexpected`` and ``stack``: a bug's exception as text safe to store (class and places, no
text)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from schemas.errors import stack, unexpected
from stages.batch.formats.timeparse import iso_to_us
from stages.ingest.validate import _walk


def test_names_the_class_and_the_innermost_frame_never_the_text() -> None:
    with pytest.raises(KeyError) as caught:
        {"lat": 1.0}["51.123456789"]
    message = unexpected(caught.value)
    assert message.startswith("KeyError at tests.unit.schemas.test_errors:")
    assert message.endswith("(test_names_the_class_and_the_innermost_frame_never_the_text)")
    assert "51.123456789" not in message


class _Exploding(dict[str, Any]):
    """A mapping whose lookups fail with a text quoting a value, as some libraries' do."""

    def get(self, *_: Any) -> Any:
        raise RuntimeError("no fix at 51.123456789")


def test_a_frame_outside_the_house_is_followed_by_the_houses_own() -> None:
    """Where another module raised, and the line of Tideway's code that called it."""
    with pytest.raises(RuntimeError) as caught:
        _walk(_Exploding(), "lat", ("pos", "lat"))
    message = unexpected(caught.value)
    assert message.startswith("RuntimeError at tests.unit.schemas.test_errors:")
    assert "(get), from stages.ingest.validate:" in message and message.endswith("(_walk)")
    assert "51.123456789" not in message


def test_a_library_error_quoting_its_input_is_not_quoted() -> None:
    with pytest.raises(ValueError) as caught:
        iso_to_us("51.123456789")  # datetime's own text quotes the string
    assert "51.123456789" in str(caught.value)
    assert unexpected(caught.value).startswith("ValueError at stages.batch.formats.timeparse:")
    with pytest.raises(json.JSONDecodeError) as decoding:
        json.loads('{"lat": 51.123456789,')
    assert unexpected(decoding.value).startswith("JSONDecodeError at json.decoder:")


def test_an_exception_never_raised_is_its_class() -> None:
    assert unexpected(ValueError("-0.987654321")) == "ValueError"


def test_a_stack_names_the_class_and_every_frame_never_the_text() -> None:
    with pytest.raises(RuntimeError) as caught:
        _walk(_Exploding(), "lat", ("pos", "lat"))
    trace = stack(caught.value).splitlines()
    assert trace[0] == "RuntimeError"
    assert trace[1].startswith("  tests.unit.schemas.test_errors:")  # outermost first
    assert trace[2].startswith("  stages.ingest.validate:") and trace[2].endswith("(_walk)")
    assert trace[-1].endswith("(get)")
    assert "51.123456789" not in stack(caught.value)
    assert stack(ValueError("-0.987654321")) == "ValueError"
