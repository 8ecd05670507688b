"""Device identity: credentials Tideway issues from its registry, checked by nats-server.

- :mod:`.tokens` signs and reads the NATS JWTs of the auth-callout exchange (on ``nkeys``).
- :mod:`.credentials` issues, rotates, revokes and lists a device's secrets (hashes only).
- :mod:`.permissions` is what each identity (a device, each Tideway process) may publish and
  subscribe to; :mod:`.broker` writes the nats-server configuration that enforces it.
- :mod:`.callout` is the auth-callout service (``tideway auth``) and the revocation sweep that
  disconnects a device whose credential stopped being valid.

docs/security.md says who may publish what and why this mechanism.
"""
