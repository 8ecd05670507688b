"""The read side: what the API answers and the CLI shows, as the ``schemas.api`` models.

One module per area (``runs``, ``sessions``, ``laps``, ``lap_trace``, ``track``, ``fleet``
with its queries ``data_quality``, ``latency``, ``parameter_series``, ``devices``,
``device_schemas``, ``dead_letters``, ``session_dead_letters``, ``demo``), and ``cursors``, the
keyset cursors every list pages with. Each function runs its
statements and returns the API's own model, so a record is declared once (in ``schemas.api``)
and the route handlers and CLI commands only open connections and print. Nothing here writes;
the hot path (``streams.ingest``) never imports it, and it imports neither ``streams.api``
nor ``streams.cli`` (import-linter holds both).
"""
