-- The Postgres login of each Tideway process (docs/deploy.md#postgres-roles).
--
-- Migration 0022 creates one NOLOGIN role per process (tideway_ingest, tideway_intake,
-- tideway_worker, tideway_api, tideway_auth, tideway_maintenance) with exactly the grants
-- that process uses. This script gives each role a login, tideway_<process>_login, with the
-- password from an environment variable, and makes every session of a login act as its role
-- (`SET role`): what a login creates - the partitions the maintenance login adds - then
-- belongs to the role, which the migrating login and any later login of the role can change,
-- not to one login.
--
-- Run it after `tideway migrate` (the roles must exist), as the login that ran migration
-- 0022 or a superuser (CREATEROLE, and on Postgres 16 the right to grant those roles), with
-- psql 15 or newer (\getenv):
--
--   TIDEWAY_PG_INGEST_PASSWORD=... TIDEWAY_PG_INTAKE_PASSWORD=... (one per login) \
--     psql -v ON_ERROR_STOP=1 -f deploy/postgres/logins.sql "$OWNER_DSN"
--
-- It is idempotent: run again, it creates nothing and sets the passwords (a rotation).
-- A variable that is not set stops it before any change. docker-compose.yml's
-- `postgres-logins` service runs it at every `up`.

\set ON_ERROR_STOP on

\getenv ingest_password TIDEWAY_PG_INGEST_PASSWORD
\getenv intake_password TIDEWAY_PG_INTAKE_PASSWORD
\getenv worker_password TIDEWAY_PG_WORKER_PASSWORD
\getenv api_password TIDEWAY_PG_API_PASSWORD
\getenv auth_password TIDEWAY_PG_AUTH_PASSWORD
\getenv maintenance_password TIDEWAY_PG_MAINTENANCE_PASSWORD

-- Every password variable set, or stop before any change.
SELECT string_agg(name, ', ') AS missing
FROM (VALUES ('TIDEWAY_PG_INGEST_PASSWORD', :{?ingest_password}),
             ('TIDEWAY_PG_INTAKE_PASSWORD', :{?intake_password}),
             ('TIDEWAY_PG_WORKER_PASSWORD', :{?worker_password}),
             ('TIDEWAY_PG_API_PASSWORD', :{?api_password}),
             ('TIDEWAY_PG_AUTH_PASSWORD', :{?auth_password}),
             ('TIDEWAY_PG_MAINTENANCE_PASSWORD', :{?maintenance_password})) AS v(name, given)
WHERE NOT given
\gset
\if :{?missing}
  \warn 'not set: ' :missing
  DO $$ BEGIN RAISE EXCEPTION 'a login password is not set (see above)'; END $$;
\endif

BEGIN;

-- Each login once (a login that exists is kept, with its password changed below).
SELECT format('CREATE ROLE %I LOGIN', r || '_login')
FROM unnest(ARRAY['tideway_ingest', 'tideway_intake', 'tideway_worker', 'tideway_api',
                  'tideway_auth', 'tideway_maintenance']) AS r
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r || '_login')
\gexec

GRANT tideway_ingest TO tideway_ingest_login;
GRANT tideway_intake TO tideway_intake_login;
GRANT tideway_worker TO tideway_worker_login;
GRANT tideway_api TO tideway_api_login;
GRANT tideway_auth TO tideway_auth_login;
GRANT tideway_maintenance TO tideway_maintenance_login;

ALTER ROLE tideway_ingest_login SET role = tideway_ingest;
ALTER ROLE tideway_intake_login SET role = tideway_intake;
ALTER ROLE tideway_worker_login SET role = tideway_worker;
ALTER ROLE tideway_api_login SET role = tideway_api;
ALTER ROLE tideway_auth_login SET role = tideway_auth;
ALTER ROLE tideway_maintenance_login SET role = tideway_maintenance;

ALTER ROLE tideway_ingest_login PASSWORD :'ingest_password';
ALTER ROLE tideway_intake_login PASSWORD :'intake_password';
ALTER ROLE tideway_worker_login PASSWORD :'worker_password';
ALTER ROLE tideway_api_login PASSWORD :'api_password';
ALTER ROLE tideway_auth_login PASSWORD :'auth_password';
ALTER ROLE tideway_maintenance_login PASSWORD :'maintenance_password';

COMMIT;
