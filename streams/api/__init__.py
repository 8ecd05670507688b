"""The HTTP API (aiohttp): session uploads and run status, API-key auth, tenant-scoped."""
