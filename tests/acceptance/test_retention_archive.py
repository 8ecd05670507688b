"""`tideway retention show | run --dry-run` with archiving switched on by the environment:
the partitions of an archived tier name the object they go to, the others none."""

from __future__ import annotations

import os
from pathlib import Path

from tests.acceptance.test_retention_batch import _tideway


def test_retention_says_what_would_be_archived(pg_dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEWAY_")}
    env.update(
        {
            "TIDEWAY_CONFIG": str(tmp_path / "absent.toml"),
            "TIDEWAY_POSTGRES_DSN": pg_dsn,
            "TIDEWAY_CLICKHOUSE_DSN": f"chdb://{tmp_path / 'chdb'}",
            "TIDEWAY_DATA_DIR": str(tmp_path / "data"),
            "TIDEWAY_LOG_LEVEL": "WARNING",
            "TIDEWAY_RETENTION__ARCHIVE": '["ingestion_records"]',
        }
    )
    ran = _tideway(env, "retention", "run", "--json")  # makes today's partitions and ahead
    assert any(name.startswith("ingestion_messages_p") for name in ran["created"])

    shown = _tideway(env, "retention", "show", "--json")
    messages = [r for r in shown if r["target"].startswith("ingestion_messages_p")]
    assert messages and all(
        r["archive_to"] == f"archive/ingestion_messages/day={r['target'][-8:-4]}-"
        f"{r['target'][-4:-2]}-{r['target'][-2:]}/{r['target']}.parquet"
        for r in messages
    )
    others = [r for r in shown if not r["target"].startswith("ingestion_messages_p")]
    assert others and all(r["archive_to"] is None for r in others)

    dry = _tideway(env, "retention", "run", "--dry-run", "--json")
    assert all(r["archive_to"] is None for r in dry["done"])  # nothing has expired yet
