"""A FIT file's data messages by name, decoded with fitdecode (CRC checked): what the export
tests read back."""

from __future__ import annotations

import io
from typing import Any

import fitdecode


def messages(data: bytes) -> dict[str, list[dict[str, Any]]]:
    """Each data message's fields with a value, grouped by message name, in file order."""
    out: dict[str, list[dict[str, Any]]] = {}
    with fitdecode.FitReader(io.BytesIO(data), check_crc=fitdecode.CrcCheck.ENABLED) as reader:
        for frame in reader:
            if isinstance(frame, fitdecode.FitDataMessage):
                out.setdefault(frame.name, []).append(
                    {f.name: f.value for f in frame.fields if f.value is not None})
    return out
