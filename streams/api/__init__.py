"""The HTTP API (aiohttp): sessions, runs, devices, schemas, dead letters and live events of the
caller's tenant, described by an OpenAPI document (``docs/api.md``)."""
