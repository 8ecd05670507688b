"""Who may publish and subscribe to what on nats-server: each device, each Tideway process.

These lists are the whole of the broker's side of least privilege (docs/security.md): the auth
service puts :func:`device_permissions` into every device's user JWT, and
:mod:`streams.identity.broker` writes :func:`role_permissions` into the server configuration
for the processes' own users. Everything not allowed is refused by nats-server itself.

All subjects and stream names come from :class:`~streams.names.Names`, so a namespaced
deployment (tests, side-by-side installs) gets permissions for its own names only.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from streams.names import Names

__all__ = ["ROLES", "Role", "device_inbox_prefix", "device_permissions", "role_permissions"]

Role = Literal["ingest", "intake", "worker", "api", "admin"]
ROLES: Final[tuple[Role, ...]] = ("ingest", "intake", "worker", "api", "admin")
"""The Tideway processes that are NATS users of their own (``simulate`` publishes as the
simulated devices, with their credentials, so it is not one of them)."""


def device_inbox_prefix(tenant: str, device: str) -> str:
    """The inbox prefix a device connects with (nats-py ``inbox_prefix``), so that the replies
    it asks for (a JetStream publish acknowledgement) come to subjects only it may read."""
    return f"_INBOX_DEV.{tenant}.{device}"


def _stream_api(stream: str) -> list[str]:
    """Everything a process does with one stream it uses: info, create/update (provisioning
    is idempotent and every process may run it), messages by sequence, consumers, acks and
    flow control. Never ``STREAM.DELETE`` (denied separately)."""
    api = "$JS.API"
    return [
        f"{api}.STREAM.*.{stream}", f"{api}.STREAM.MSG.*.{stream}",
        f"{api}.CONSUMER.*.{stream}", f"{api}.CONSUMER.*.{stream}.>",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.>", f"{api}.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"{api}.DIRECT.GET.{stream}", f"{api}.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>",
    ]


_ALWAYS: Final = ["$JS.API.INFO", "$JS.API.STREAM.NAMES"]
_DENY_ALWAYS: Final = ["$JS.API.STREAM.DELETE.>", "$SYS.>"]


def _permissions(publish: list[str], subscribe: list[str], *, deny: list[str] | None = None
                 ) -> dict[str, Any]:
    return {
        "publish": {"allow": publish, "deny": [*_DENY_ALWAYS, *(deny or [])]},
        "subscribe": {"allow": subscribe, "deny": ["$SYS.>"]},
    }


def role_permissions(role: Role, names: Names) -> dict[str, Any]:
    """nats-server ``permissions`` of one Tideway process's user (server-config form)."""
    telemetry = [names.telemetry_stream, names.dead_letter_stream]
    sessions = [names.sessions_stream, names.sessions_dead_letter_stream]
    bucket = names.session_bucket
    objects = [f"OBJ_{bucket}"]
    events = names.events_subjects
    inbox = ["_INBOX.>"]
    streams: list[str]
    publish: list[str]
    subscribe: list[str] = list(inbox)
    if role == "admin":
        # The operator's tools (streams init, replay, redrive, uploads, messages show): every
        # Tideway subject of the account, still never another account's or $SYS.
        # Nothing Tideway does deletes a stream, so not even the operator's tools may.
        return {"publish": {"allow": [">"], "deny": _DENY_ALWAYS},
                "subscribe": {"allow": [">"], "deny": ["$SYS.>"]}}
    if role == "ingest":
        streams = telemetry
        publish = [names.dead_letter_subjects]
    elif role == "intake":
        streams = [*sessions, *objects]
        publish = [names.sessions_dead_letter_subjects, f"$O.{bucket}.>"]
    elif role == "worker":
        # The event relay: publishes the outbox to the EVENTS stream (and provisions it).
        streams = [names.events_stream]
        publish = [events]
    elif role == "api":
        # Uploads (a session notice), redrives (an envelope back on its subject), the dead
        # letter and message views (messages by sequence), the event stream (an ordered
        # consumer of EVENTS, delivered to an inbox).
        streams = [*telemetry, *sessions, *objects, names.events_stream]
        publish = [names.subject("telemetry.>"), names.subject("sessions.>"),
                   names.subject("dlq.>"), f"$O.{bucket}.>"]
    else:  # pragma: no cover - Role is a closed set
        raise ValueError(role)
    api = [*_ALWAYS, *(s for stream in streams for s in _stream_api(stream))]
    return _permissions([*publish, *api], subscribe)


def device_permissions(tenant: str, device: str, names: Names) -> dict[str, Any]:
    """The user-JWT permissions of one device (JWT form: ``pub``/``sub``).

    It may publish its own envelopes (``telemetry.<tenant>.<device>.>``; over MQTT the topic
    ``telemetry/<tenant>/<device>/...``), its own session notice, and put a file into the
    session bucket for that notice (chunks and the object's meta; never purge or delete); it
    may subscribe only to its own inbox. The JetStream API beyond the bucket's info and
    message reads, every other device's and tenant's subjects, and ``$SYS`` are refused.
    """
    bucket = names.session_bucket
    stream = f"OBJ_{bucket}"
    inbox = device_inbox_prefix(tenant, device)
    return {
        "pub": {
            "allow": [
                names.subject(f"telemetry.{tenant}.{device}.>"),
                names.sessions_subject(tenant, device),
                f"$O.{bucket}.C.>", f"$O.{bucket}.M.>",
                "$JS.API.INFO", f"$JS.API.STREAM.INFO.{stream}",
                f"$JS.API.STREAM.MSG.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
            ],
            "deny": ["$SYS.>", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.DELETE.>"],
        },
        "sub": {"allow": [f"{inbox}.>"], "deny": ["$SYS.>"]},
    }
