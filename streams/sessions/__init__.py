"""The batch half's runtime around whole-session files.

Handoff (``upload``, ``intake``), storage of derived datasets (``datasets``), the executors
that wire the pure stages of ``stages.session`` into the job engine (``executors``), the
ClickHouse cache (``materialise``), publishing (``publish``) and blue/green reprocessing
(``reprocess``). See ``docs/sessions.md``.
"""
