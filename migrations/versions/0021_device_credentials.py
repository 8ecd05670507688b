"""device credentials: the secrets a device connects to NATS (and MQTT) with, as hashes

Issue 25. A device proves who it is to nats-server with a secret Tideway issued from this
registry; the auth-callout service (``tideway auth``, ``streams.identity.callout``) looks the
secret up here on every connect and answers with the only subjects that device may use.

* ``device_credentials``: one row per secret ever issued. ``key_id`` is the secret's public
  part (it is in the secret's text, so a lookup is one unique-index probe); ``secret_hash`` the
  SHA-256 of the whole secret (the secret has 256 random bits: a fast hash is enough, there is
  nothing to brute-force). The secret itself is shown once and never stored. A credential is
  valid while ``revoked_at`` is NULL and its device exists and is active; revoked rows stay as
  the record of what was issued and when it ended (``revoked_reason``: ``revoked``,
  ``rotated``). Deleting a device deletes its credentials.
* Triggers announce every change that can take a device's access away - a credential revoked,
  a device deactivated or deleted - on the channel ``tideway_device_access`` with the payload
  ``<tenant>.<device>``, delivered when the transaction commits. The auth service listens and
  disconnects that device's connections at once, whatever path made the change (the CLI, the
  API, plain SQL).

Revision ID: 0021_device_credentials
Revises: 0020_lean_records
"""

from __future__ import annotations

from alembic import op

revision = "0021_device_credentials"
down_revision = "0020_lean_records"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE device_credentials (
            id uuid NOT NULL DEFAULT gen_random_uuid(),
            tenant_id uuid NOT NULL,
            device_id uuid NOT NULL,
            key_id text NOT NULL,
            secret_hash bytea NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            revoked_at timestamptz,
            revoked_reason text,
            CONSTRAINT pk_device_credentials PRIMARY KEY (id),
            CONSTRAINT fk_device_credentials_tenant_id_tenants FOREIGN KEY (tenant_id)
                REFERENCES tenants (id),
            CONSTRAINT fk_device_credentials_device_id_devices FOREIGN KEY (device_id)
                REFERENCES devices (id) ON DELETE CASCADE,
            CONSTRAINT uq_device_credentials_key_id UNIQUE (key_id),
            CONSTRAINT ck_device_credentials_key_id_format CHECK (key_id ~ '^[a-z2-7]{16}$'),
            CONSTRAINT ck_device_credentials_secret_hash_length
                CHECK (length(secret_hash) = 32),
            CONSTRAINT ck_device_credentials_revoked_reason_known
                CHECK (revoked_reason IN ('revoked', 'rotated')),
            CONSTRAINT ck_device_credentials_revoked_with_reason
                CHECK ((revoked_at IS NULL) = (revoked_reason IS NULL))
        )
        """
    )
    op.execute(
        "CREATE INDEX ix_device_credentials_device ON device_credentials (device_id, created_at)"
    )
    op.execute(
        """
        CREATE FUNCTION tideway_device_access_changed() RETURNS trigger
        LANGUAGE plpgsql AS $$
        DECLARE
            row_device uuid;
        BEGIN
            IF TG_TABLE_NAME = 'device_credentials' THEN
                row_device := NEW.device_id;
            ELSIF TG_OP = 'DELETE' THEN
                row_device := OLD.id;
            ELSE
                row_device := NEW.id;
            END IF;
            IF TG_OP = 'DELETE' THEN
                PERFORM pg_notify('tideway_device_access', t.name || '.' || OLD.external_id)
                FROM tenants t WHERE t.id = OLD.tenant_id;
            ELSE
                PERFORM pg_notify('tideway_device_access', t.name || '.' || d.external_id)
                FROM devices d JOIN tenants t ON t.id = d.tenant_id WHERE d.id = row_device;
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER device_credential_revoked AFTER UPDATE OF revoked_at"
        " ON device_credentials FOR EACH ROW WHEN (NEW.revoked_at IS NOT NULL"
        " AND OLD.revoked_at IS NULL) EXECUTE FUNCTION tideway_device_access_changed()"
    )
    op.execute(
        "CREATE TRIGGER device_deactivated AFTER UPDATE OF active ON devices FOR EACH ROW"
        " WHEN (OLD.active AND NOT NEW.active) EXECUTE FUNCTION tideway_device_access_changed()"
    )
    op.execute(
        "CREATE TRIGGER device_deleted AFTER DELETE ON devices FOR EACH ROW"
        " EXECUTE FUNCTION tideway_device_access_changed()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS device_deleted ON devices")
    op.execute("DROP TRIGGER IF EXISTS device_deactivated ON devices")
    op.execute("DROP TABLE IF EXISTS device_credentials")
    op.execute("DROP FUNCTION IF EXISTS tideway_device_access_changed()")
