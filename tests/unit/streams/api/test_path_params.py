"""Path parameters: what the OpenAPI document says each kind is and what the API accepts are one
(no services). Each value below is judged twice, by a JSON Schema validator on the document's
schema and by the check the route applies, and the two must agree."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from streams.api import path_params as pp
from streams.api.routes import ROUTES
from streams.errors import UsageError

_SAMPLES: dict[str, tuple[pp.PathParam, list[str]]] = {
    "uuid": (pp.UUID_ID, [str(uuid.uuid4()), str(uuid.uuid4()).upper(), "not-a-uuid", "",
                          uuid.uuid4().hex, "{" + str(uuid.uuid4()) + "}",
                          str(uuid.uuid4()) + "\n"]),
    "numeric": (pp.NUMERIC_ID, ["0", "21", str(2**63 - 1), str(2**63), "1" * 25, "-1", "1.0",
                                "", "1\n", "٢"]),
    "lap": (pp.LAP, ["0", "3", str(2**31 - 1), str(2**31), "x"]),
    "device": (pp.DEVICE, ["d1", "kart-1_A", "a" * 128, "a" * 129, "", "a.b", "ws 7", "d1\n",
                           "ß", "a/b"]),
    "schema": (pp.SCHEMA_NAME, ["fleet", "a-b_c", "Fleet", "-a", "a" * 63, "a" * 64, "x\n"]),
    "key_id": (pp.KEY_ID, ["aaaaaaaaaaaaaaaa", "abcdefgh23456722", "aaaaaaaaaaaaaaa1",
                           "AAAAAAAAAAAAAAAA", "aaaaaaaaaaaaaaaaa"]),
    "group": (pp.GROUP, ["WyJFTlZFTE9QRV9VTlBBUlNFQUJMRSIsImluZ3Jlc3MiLG51bGwsbnVsbF0", "a",
                         "a=", "", "a" * 1001, "a\n"]),
    "message": (pp.MESSAGE, ["21", "m:acme:probe-1", "m:acme:a/b?c#d", "r:acme:17:3",
                             "m:Acme:x", "m:acme:", "m:acme:a b", "r:acme:1", "x:acme:1",
                             "0123456789abcdef0123456789ABCDEF", str(uuid.uuid4()), "21\n",
                             "hello"]),
}


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's ``pattern`` as ECMA-262 reads it: ``$`` is the very end (Python's ``$``
    also matches before a final newline, which is why the API checks with ``fullmatch``)."""
    if isinstance(instance, str) and not re.search(re.sub(r"\$$", r"\\Z", pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _ecma_pattern}
)


def _documented(kind: pp.PathParam, raw: str) -> bool:
    schema = kind.described()
    value: object = raw
    if schema.get("type") == "integer":  # a path carries the integer's digits
        if not (raw.isascii() and raw.isdigit()):
            return False
        value = int(raw)
    checker = _Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return checker.is_valid(value)


def _accepted(kind: pp.PathParam, raw: str) -> bool:
    try:
        kind.check("p", raw)
    except UsageError:
        return False
    return True


@pytest.mark.parametrize(
    ("kind", "raw"),
    [(kind, raw) for kind, samples in _SAMPLES.values() for raw in samples],
)
def test_the_document_and_the_check_agree(kind: pp.PathParam, raw: str) -> None:
    assert _accepted(kind, raw) == _documented(kind, raw), repr(raw)


def test_a_refusal_names_the_parameter_and_what_it_must_be() -> None:
    with pytest.raises(UsageError) as err:
        pp.DEVICE.check("device", "a.b")
    assert err.value.code == "USAGE_ERROR"
    assert str(err.value) == (
        "path parameter 'device' must be a device id (1 to 128 letters, digits, - and _)"
    )


def test_every_path_parameter_of_the_table_has_a_kind_and_every_id_route_a_404_text() -> None:
    for route in ROUTES:
        if "{" in route.path:
            assert route.path_types and route.not_found, route.path
