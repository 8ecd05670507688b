"""The batch half's runtime around whole-session files.

Handoff (``upload``, ``intake``, ``run_creation``), storage of derived datasets
(``datasets``), the executors that wire the pure stages of ``stages.batch`` into the job engine
(``stage_executors``), the ClickHouse cache (``materialise``), the ``publish_session`` job
(``publish_session``) and blue/green reprocessing (``reprocess``). See ``docs/sessions.md``.
"""
