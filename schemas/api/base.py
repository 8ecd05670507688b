"""Pieces every area of the API's bodies uses: pages, problems, checked text, limits and cursors."""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

LIMIT_DEFAULT = 50
LIMIT_MAX = 200


Text = Annotated[str, Field(pattern=r"^[^\x00]*$")]
"""Client text Postgres can store: no NUL (Postgres refuses it), said by a pattern so that the
document says it too. (Lone surrogates need no rule: the JSON parser refuses them in a body,
the edge in a query string - ``streams.api.inputs`` - and JSON Schema strings have none.)"""

CURSOR_PATTERN = "^[A-Za-z0-9_-]{1,1000}$"
"""A page cursor or a dead-letter group id: base64url without padding."""

Limit = Annotated[int, Field(ge=1, le=LIMIT_MAX, description="Items per page.")]
_CURSOR_HELP = (
    "Where the page starts: the `cursor` of the previous page's `next` link, as it is "
    "(base64url, no padding, of the last item's sort key as a JSON array; opaque and checked: "
    "one the API did not make is a 400)."
)


class _Body(BaseModel):
    """An answer. A field declared ``exclude=True`` is operator-only: the CLI, which serves
    every tenant, shows it (:func:`operator_fields`); the API's answers and its document leave
    it out. So a record the CLI shows with a little more is still declared once."""

    model_config = ConfigDict(frozen=True)


def operator_fields(model: BaseModel) -> dict[str, Any]:
    """``model`` as plain data, its operator-only fields included, in declaration order, each
    under its name on the wire (its alias, where it has one)."""
    fields = type(model).model_fields
    return {f.alias or name: _plain(getattr(model, name)) for name, f in fields.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return operator_fields(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class _Request(BaseModel):
    """A JSON body or query string a client sends: unknown fields are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class _Query(BaseModel):
    """A query string: unknown parameters are ignored (as HTTP caches and proxies add some)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    limit: Limit = LIMIT_DEFAULT
    # A field with a pattern of its own is a plain ``str`` (its pattern excludes NUL too):
    # pydantic keeps one pattern, and which one when ``Text``'s meets the field's is not one
    # rule.
    cursor: str | None = Field(None, pattern=CURSOR_PATTERN, description=_CURSOR_HELP)


T = TypeVar("T")


class Page(_Body, Generic[T]):
    """One page of a list, in a stable order."""

    items: list[T]
    next: str | None = Field(
        pattern="^/v1/",
        description=(
            "The next page's path: this request's path and query with `cursor` set (follow it "
            "with the same key); null on the last page."
        ),
    )


class Problem(_Body):
    """An error (RFC 9457 problem details, ``application/problem+json``)."""

    type: str = Field(description="`urn:tideway:error:<code>`; see docs/errors.md.")
    title: str = Field(description="The HTTP status's reason phrase.")
    status: int
    detail: str = Field(description="What went wrong, for a person.")
    code: str = Field(description="The stable error code (schemas/error_codes.py).")
    request_id: str | None = Field(None, description="The request's X-Request-Id.")


class Health(_Body):
    status: Literal["ok", "degraded"]
    checks: dict[str, bool]
