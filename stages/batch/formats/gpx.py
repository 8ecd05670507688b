"""GPX 1.1 tracks (with Garmin TrackPointExtension): reader and writer.

Every ``<trkpt>`` with a ``<time>`` becomes one GNSS row (``lat``/``lon`` attributes,
``<ele>`` metres, ``<hdop>``, ``<sat>``, ``<fix>``; ``none`` fixes are dropped). Garmin's
TrackPointExtension (v1 or v2, matched by local name so either namespace works) adds AUX
channels ``heart_rate`` (``hr``, beats/min), ``cadence`` (``cad``, rev/min), ``temperature``
(``atemp``, °C) and ``water_temperature`` (``wtemp``, °C); its v2 ``speed`` (m/s) and
``course`` (degrees) fill the GNSS columns. GPX units are already canonical.

Documents with a DTD, entity declarations or external references are refused
(``UNSUPPORTED_FORMAT``): GPX never needs them and they are the vehicle of entity-expansion and
external-entity attacks. The refusal is made by ``defusedxml`` inside the XML parser, after the
parser has decoded the document, so it holds in every encoding expat reads (UTF-8, UTF-16 LE/BE
with or without a byte-order mark, ...): a byte search for ``<!DOCTYPE`` would miss the UTF-16
spelling. A UTF-16 GPX parses to the same samples as its UTF-8 twin.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from xml.sax.saxutils import escape

import pyarrow as pa
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring as safe_fromstring

from schemas import error_codes as codes
from stages.batch import canonical
from stages.batch.contract import SessionStageError
from stages.batch.formats.parsed import ParsedSession
from stages.batch.formats.spec import FormatSpec, Head, Sniffed, dateless, one_layout
from stages.batch.formats.timeparse import iso_to_us, us_to_iso

GPX_NS: Final = "http://www.topografix.com/GPX/1/1"
TPX_NS: Final = "http://www.garmin.com/xmlschemas/TrackPointExtension/v2"
# Tideway's own extension: which lap a track segment is (an export's laps, see docs/sessions.md).
TIDEWAY_NS: Final = "https://tideway.dev/xmlschemas/gpx/v1"
_EXT_CHANNELS: Final = {
    "hr": canonical.HEART_RATE,
    "cad": canonical.CADENCE,
    "atemp": canonical.TEMPERATURE,
    "wtemp": "water_temperature",
}
_EXT_ORDER: Final = ("atemp", "wtemp", "hr", "cad")  # the XSD's sequence order
_FIX_QUALITY: Final = {"2d": 1, "3d": 1, "dgps": 2, "pps": 3}
_GNSS_NUMBERS: Final = ("alt_m", "speed_mps", "course_deg", "hdop")
_GPX_VERSION: Final = re.compile(rb"<gpx\b[^>]*\bversion\s*=\s*[\"']([0-9.]+)[\"']")


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def read(data: bytes) -> ParsedSession:
    """Parse a GPX document into GNSS + AUX streams."""
    try:
        # forbid_dtd: any DTD at all, not only one declaring entities (the defaults also refuse
        # entity declarations and external references, whichever way they are reached).
        root = safe_fromstring(data, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise SessionStageError(
            # By kind: the exception's text quotes the document's names and addresses.
            f"GPX with DTD/entities/external references refused ({type(exc).__name__})",
            code=codes.UNSUPPORTED_FORMAT,
        ) from exc
    except ET.ParseError as exc:
        raise SessionStageError(
            f"GPX is not well-formed XML: {exc}", code=codes.CORRUPT_ARTIFACT
        ) from exc
    if _local(root.tag) != "gpx":
        raise SessionStageError("XML root is not <gpx>", code=codes.UNSUPPORTED_FORMAT)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    counts: Counter[str] = Counter()
    cols: dict[str, list[float | int | None]] = {
        c: [] for c in ("ts", "lat_deg", "lon_deg", *_GNSS_NUMBERS, "fix_quality", "sats")
    }
    aux_ts: list[int] = []
    aux_ch: list[str] = []
    aux_val: list[float] = []
    for pt in root.iter(f"{ns}trkpt"):
        counts["points"] += 1
        try:
            row = _point(pt)
        except (ValueError, KeyError):  # a bad number or time, or no lat/lon attribute
            counts["bad_points"] += 1
            continue
        if row is None:
            counts["points_without_time_or_fix"] += 1
            continue
        values, extras = row
        for name, v in values.items():
            cols[name].append(v)
        ts = values["ts"]
        for ch, v in extras.items():
            aux_ts.append(ts)  # type: ignore[arg-type]
            aux_ch.append(ch)
            aux_val.append(v)
    gnss = pa.table({n: pa.array(v, canonical.GNSS_SCHEMA.field(n).type) for n, v in cols.items()})
    aux = pa.table(
        {
            "ts": pa.array(aux_ts, canonical.TS_TYPE),
            "channel": pa.array(aux_ch, pa.string()),
            "value": pa.array(aux_val, pa.float64()),
        }
    )
    counts["aux_values"] = len(aux_val)
    return ParsedSession(
        streams={
            canonical.GNSS: canonical.conform(canonical.GNSS, gnss),
            canonical.AUX: canonical.conform(canonical.AUX, aux),
        },
        stats=dict(sorted(counts.items())),
    )


def _point(pt: ET.Element) -> tuple[dict[str, float | int | None], dict[str, float]] | None:
    """One ``<trkpt>``: canonical GNSS values and AUX channel values (None: no time / no fix)."""
    row: dict[str, float | int | None] = dict.fromkeys(
        ("ts", *_GNSS_NUMBERS, "fix_quality", "sats")
    )
    row["lat_deg"] = float(pt.attrib["lat"])
    row["lon_deg"] = float(pt.attrib["lon"])
    extras: dict[str, float] = {}
    for child in pt:
        name, text = _local(child.tag), (child.text or "").strip()
        if name == "time" and text:
            row["ts"] = iso_to_us(text)
        elif name == "ele" and text:
            row["alt_m"] = float(text)
        elif name == "hdop" and text:
            row["hdop"] = float(text)
        elif name == "sat" and text:
            row["sats"] = int(text)
        elif name == "fix" and text:
            if text == "none":
                return None
            row["fix_quality"] = _FIX_QUALITY.get(text)
        elif name in ("speed", "course") and text:  # GPX 1.0 kept these on the point
            row["speed_mps" if name == "speed" else "course_deg"] = float(text)
        elif name == "extensions":
            for el in child.iter():
                tag, val = _local(el.tag), (el.text or "").strip()
                if not val:
                    continue
                if tag in _EXT_CHANNELS:
                    extras[_EXT_CHANNELS[tag]] = float(val)
                elif tag == "speed":
                    row["speed_mps"] = float(val)
                elif tag == "course":
                    row["course_deg"] = float(val)
    if row["ts"] is None:
        return None
    return row, extras


@dataclass(frozen=True, kw_only=True)
class TrackSegment:
    """One ``<trkseg>`` of a written track: the GNSS rows up to ``stop`` (exclusive) from where
    the previous segment stopped, and the lap they are (``None``: outside every lap)."""

    stop: int
    lap: int | None = None


def write(
    streams: Mapping[str, pa.Table],
    *,
    segments: Sequence[TrackSegment] = (),
    name: str = "session",
    description: str | None = None,
) -> bytes:
    """Serialise canonical GNSS (+ AUX channels at the same timestamps) as GPX 1.1: one
    ``<trk>`` named ``name``, one ``<trkseg>`` per entry of ``segments`` (one for every row
    when there are none). A lap's segment says its lap in a ``<tideway:lap>`` extension,
    which other readers skip."""
    gnss = streams.get(canonical.GNSS, canonical.empty(canonical.GNSS))
    aux = streams.get(canonical.AUX, canonical.empty(canonical.AUX))
    by_ts: dict[int, dict[str, float]] = {}
    tag_of = {ch: tag for tag, ch in _EXT_CHANNELS.items()}
    aux_ts = aux.column("ts").cast(pa.int64()).to_pylist()
    for ts, ch, v in zip(
        aux_ts, aux.column("channel").to_pylist(), aux.column("value").to_pylist(), strict=True
    ):
        if ch in tag_of:
            by_ts.setdefault(ts, {})[tag_of[ch]] = v
    rows = gnss.select(["lat_deg", "lon_deg", "alt_m", "speed_mps", "course_deg", "hdop", "sats"])
    points = [
        _trkpt(ts, r, by_ts.get(ts, {}))
        for ts, r in zip(gnss.column("ts").cast(pa.int64()).to_pylist(), rows.to_pylist(),
                         strict=True)
    ]  # fmt: skip
    laps_ns = f' xmlns:tideway="{TIDEWAY_NS}"' if any(g.lap is not None for g in segments) else ""
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<gpx version="1.1" creator="Tideway" xmlns="{GPX_NS}" xmlns:gpxtpx="{TPX_NS}"'
        f"{laps_ns}>\n<trk><name>{escape(name)}</name>"
        + (f"<desc>{escape(description)}</desc>" if description else "")
        + "\n"
    ]
    start = 0
    for seg in segments or (TrackSegment(stop=len(points)),):
        out.append("<trkseg>\n")
        out.extend(points[start : seg.stop])
        if seg.lap is not None:
            out.append(f"<extensions><tideway:lap>{seg.lap}</tideway:lap></extensions>\n")
        out.append("</trkseg>\n")
        start = seg.stop
    out.append("</trk>\n</gpx>\n")
    return "".join(out).encode()


def _trkpt(ts: int, r: Mapping[str, float | None], found: Mapping[str, float]) -> str:
    parts = [f'<trkpt lat="{r["lat_deg"]:.8f}" lon="{r["lon_deg"]:.8f}">']
    if r["alt_m"] is not None:
        parts.append(f"<ele>{r['alt_m']:.3f}</ele>")
    parts.append(f"<time>{us_to_iso(ts)}</time>")
    if r["sats"] is not None:
        parts.append(f"<sat>{r['sats']}</sat>")
    if r["hdop"] is not None:
        parts.append(f"<hdop>{r['hdop']:.2f}</hdop>")
    ext = [f"<gpxtpx:{t}>{found[t]:g}</gpxtpx:{t}>" for t in _EXT_ORDER if t in found]
    if r["speed_mps"] is not None:
        ext.append(f"<gpxtpx:speed>{r['speed_mps']:.4f}</gpxtpx:speed>")
    if r["course_deg"] is not None:
        ext.append(f"<gpxtpx:course>{r['course_deg']:.2f}</gpxtpx:course>")
    if ext:
        parts.append(
            "<extensions><gpxtpx:TrackPointExtension>"
            + "".join(ext)
            + "</gpxtpx:TrackPointExtension></extensions>"
        )
    parts.append("</trkpt>\n")
    return "".join(parts)


def sniff(head: Head) -> Sniffed | None:
    """An XML head is GPX when a ``<gpx`` root element is present (any encoding: see
    :mod:`.sniff`); variant is the GPX version, TrackPointExtension announces AUX."""
    if head.shape != "xml" or b"<gpx" not in head.body:
        return None
    version = _GPX_VERSION.search(head.body)
    tpx = b"TrackPointExtension" in head.body
    return Sniffed(
        format="gpx",
        variant=version.group(1).decode() if version else None,
        streams=("gnss", "aux") if tpx else ("gnss",),
        hints={"garmin_trackpoint_extension": tpx},
    )


SPEC: Final = FormatSpec(
    name="gpx",
    media_type="application/gpx+xml",
    extensions=frozenset({"gpx", "xml"}),
    sniff=sniff,
    sniff_priority=20,
    read=dateless(read),
    write=one_layout(write),
)
