"""Where the shared receiver logs live: ``$TIDEWAY_SHARED_DIR/data/nmea``.

The repository is checked out at ``<root>/main`` and the shared material at ``<root>/shared``,
so the default is ``<repo>/../shared``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("TIDEWAY_SHARED_DIR", REPO / ".." / "shared"))
NMEA_DIR = SHARED / "data" / "nmea"


def log(name: str) -> bytes:
    """The bytes of one receiver log."""
    return (NMEA_DIR / name).read_bytes()
