"""event outbox: domain events written in the transaction of the change they announce

Issue 27 (spec 003 "transactional outbox"). Until now a run's events went out on core NATS
after (and ``session.published`` before) the change committed: an event could announce a
change that was then refused, and one lost in a NATS blip was never sent.

Now the database writes them itself. Triggers append one row to ``event_outbox`` in the same
transaction as the change:

==============================================  ===========================================
change                                          event
==============================================  ===========================================
a run is created                                ``run.<status>`` (``run.pending``)
a run's status changes                          ``run.<new status>``
a session's active run changes (a run           ``session.published`` (``run_id`` the new
published, or a rollback moved the pointer)     active run, ``previous_run_id`` the old)
==============================================  ===========================================

so an event exists exactly when its change committed, whichever code path made the change
(intake, the worker, the API's and the CLI's run actions, reprocess, rollback). The trigger
also notifies ``tideway_events`` (one notification per transaction: Postgres folds identical
ones), which wakes the relay (``streams.domain_events.relay``) that publishes each row to the
EVENTS JetStream stream with the row's id as ``Nats-Msg-Id`` and stamps ``relayed_at``.

Order: ``id`` is taken inside the changing transaction, after it locked the run's (or the
session's) row, so two changes of one run or one session get ids in commit order; the relay
publishes in ``id`` order, one leader at a time.

The trigger functions run as their owner (``SECURITY DEFINER``): no process role needs a grant
on the outbox to change a run. The worker, which relays, reads it, stamps it and deletes what
was relayed long ago.

Revision ID: 0025_event_outbox
Revises: 0024_job_started_at
"""

from __future__ import annotations

from alembic import op

revision = "0025_event_outbox"
down_revision = "0024_job_started_at"
branch_labels = None
depends_on = None

CHANNEL = "tideway_events"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE event_outbox (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            tenant_id uuid NOT NULL,
            kind text NOT NULL,
            run_id uuid,
            session_id uuid,
            fields jsonb NOT NULL DEFAULT '{}'::jsonb,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            relayed_at timestamptz
        )
        """
    )
    # The relay's one question ("what is not relayed yet, oldest first") on a small index.
    op.execute(
        "CREATE INDEX ix_event_outbox_unrelayed ON event_outbox (id) WHERE relayed_at IS NULL"
    )
    op.execute(
        f"""
        CREATE FUNCTION tideway_run_event() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
        BEGIN
            INSERT INTO event_outbox (tenant_id, kind, run_id, session_id, fields)
            VALUES (NEW.tenant_id, 'run.' || NEW.status, NEW.id, NEW.session_id,
                    jsonb_build_object('status', NEW.status));
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER tideway_run_created AFTER INSERT ON processing_runs
        FOR EACH ROW EXECUTE FUNCTION tideway_run_event()
        """
    )
    op.execute(
        """
        CREATE TRIGGER tideway_run_status_changed AFTER UPDATE OF status ON processing_runs
        FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
        EXECUTE FUNCTION tideway_run_event()
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION tideway_session_event() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
        BEGIN
            INSERT INTO event_outbox (tenant_id, kind, run_id, session_id, fields)
            VALUES (NEW.tenant_id, 'session.published', NEW.active_run_id, NEW.id,
                    jsonb_build_object('previous_run_id', OLD.active_run_id));
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER tideway_session_pointer_moved AFTER UPDATE OF active_run_id ON sessions
        FOR EACH ROW WHEN (NEW.active_run_id IS DISTINCT FROM OLD.active_run_id
                           AND NEW.active_run_id IS NOT NULL)
        EXECUTE FUNCTION tideway_session_event()
        """
    )
    op.execute("REVOKE ALL ON FUNCTION tideway_run_event(), tideway_session_event() FROM PUBLIC")
    # The relay runs in the worker; retention's reads take everything.
    op.execute("GRANT SELECT, UPDATE (relayed_at), DELETE ON event_outbox TO tideway_worker")
    op.execute("GRANT SELECT ON event_outbox TO tideway_maintenance")


def downgrade() -> None:
    op.execute("DROP TRIGGER tideway_session_pointer_moved ON sessions")
    op.execute("DROP TRIGGER tideway_run_status_changed ON processing_runs")
    op.execute("DROP TRIGGER tideway_run_created ON processing_runs")
    op.execute("DROP FUNCTION tideway_session_event()")
    op.execute("DROP FUNCTION tideway_run_event()")
    op.execute("DROP TABLE event_outbox")
