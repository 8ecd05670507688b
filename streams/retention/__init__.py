"""Retention of what Tideway stores: time partitions created ahead and dropped when expired.

* :mod:`streams.retention.plan` — the retention plan as plain items (pure: partitions, settings
  and ``now`` in, items out); other tiers add theirs to the same list.
* :mod:`streams.retention.sql` — the catalogue reads and DDL, by name.
* :mod:`streams.retention.maintain` — carries a plan out, keeps partitions created ahead,
  starts dedupe generations, and the leader-elected loop the consumer processes run.
* :mod:`streams.retention.archive` — with ``retention.archive``, an expired partition
  exported to Parquet in the object store, verified and recorded before it is dropped.
* :mod:`streams.retention.restore` — archived rows put back in temporary tables, so that
  ``tideway messages show`` explains an archived envelope with its usual statements.
"""
