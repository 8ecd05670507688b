"""Secrets never reach a log line: the last step of every rendered line, text or JSON.

What is removed, wherever it appears in the line (the message, a field, a traceback, an
exception's text quoting raw request bytes):

- Tideway's API keys (``tw_<prefix>_<secret>``) and device secrets (``twd_<key>_<secret>``),
  also cut short (a parser's error quotes a truncated header);
- ``Bearer`` tokens and ``Authorization`` header values;
- the password of a URL (``postgresql://user:pw@host``, ``nats://user:pw@host``);
- ``password``/``secret``/``token`` values written as ``key=value`` (a libpq DSN),
  ``key: value`` or ``'key': 'value'`` (a dict's repr);
- nkey seeds (``SU…``, ``SA…``: 58 characters of base32).

It works on text, so it also covers what Tideway does not format itself (a library's
exception message). Patterns are kept narrow enough that ordinary words and ids survive; a
false positive costs a ``***`` in a log line, a miss costs a credential.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["MASK", "redact", "redact_rendered"]

MASK: Final = "***"

_PATTERNS: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # Tideway's own secrets, whole or cut short (at least 4 characters after the prefix).
    (re.compile(r"\btwd?_[A-Za-z0-9_-]{4,}"), "tw_" + MASK),
    # HTTP credentials, however the header line was quoted.
    (re.compile(r"(?i)\b(bearer|basic)(\s+|\\x20|%20)[^\s'\"\\,;]+"), r"\1 " + MASK),
    (re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?!bearer|basic)[^\s'\",;]+"),
     r"\1" + MASK),
    # user:password@ in any URL.
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@'\"]*):[^\s@/'\"]*@"), r"\1:" + MASK + "@"),
    # password=..., 'password': '...', password: ... (DSNs, reprs, YAML-ish text).
    (re.compile(r"(?i)\b((?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|seed)['\"]?"
                r"\s*[=:]\s*['\"]?)[^\s'\",;}&)]+"), r"\1" + MASK),
    # nkey seeds: S + kind + 56 base32 characters.
    (re.compile(r"\bS[UACNOXP][A-Z2-7]{50,}\b"), "S" + MASK),
)


def redact(text: str) -> str:
    """``text`` with every secret the patterns know replaced by ``***``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_rendered(_logger: Any, _method: str, rendered: Any) -> Any:
    """The last structlog processor: the rendered line (a string), redacted."""
    if isinstance(rendered, str):
        return redact(rendered)
    if isinstance(rendered, bytes):
        return redact(rendered.decode("utf-8", "replace"))
    return rendered
