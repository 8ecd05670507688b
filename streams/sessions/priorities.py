"""Default run priorities: who asked for a run decides where it queues (spec 000 §12.2).

Jobs are claimed by ``priority DESC, created_at`` (``streams.jobs.sql.CLAIM``), so a person
waiting on an upload goes ahead of a device's routine upload, which goes ahead of reprocessing
and, last, backfills. These are defaults: a caller may ask for another priority, but an API key
never above its tenant's maximum (``quotas.max_priority`` or ``tenants.max_priority``, which
by default is :data:`UPLOAD`).
"""

from __future__ import annotations

from typing import Final

UPLOAD: Final = 100
"""A CLI or HTTP upload (someone is waiting for it)."""
DEVICE: Final = 50
"""A device's upload through the session bucket."""
REPROCESS: Final = 0
"""``tideway sessions reprocess`` (a new run of a session already processed)."""
BACKFILL: Final = -100
"""``tideway runs backfill`` (many sessions with the latest versions)."""
