"""The simulated fleet: a weather-station schema and the envelopes its devices send.

Everything here is deterministic given the ``random.Random`` passed in (``tideway simulate
--seed``), so a simulation can be repeated exactly. ``simulate.py`` does the publishing.

The demo schema's ``state`` topic has ten parameters (eight measured, two with a mutation,
two derived), like the one issue 2 sketches and the benchmark requires.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

SCHEMA_NAME = "weather-station"
TOPIC = "state"
UNKNOWN_TOPIC = "diagnostics"

_DEMO_SCHEMA = """\
schema: weather-station
tenant: {tenant}
description: Simulated outdoor weather stations (tideway simulate / demo / bench).
topics:
  - name: state
    parameters:
      - {{name: temp_c, source: temp, type: number, unit: degC, required: true, critical: true,
          min: -60, max: 80}}
      - {{name: humidity, source: rh, type: number, unit: "%", min: 0, max: 100}}
      - {{name: pressure_hpa, source: pressure_pa, type: number, unit: hPa,
          mutate: "value / 100"}}
      - {{name: battery_v, source: bat_mv, type: number, unit: V, mutate: "value / 1000"}}
      - {{name: door_open, source: door, type: boolean}}
      - {{name: wind_ms, source: wind.speed, type: number, unit: m/s, min: 0}}
      - {{name: wind_dir, source: wind.dir, type: integer, unit: deg, min: 0, max: 360}}
      - {{name: firmware, source: fw, type: string}}
      - {{name: temp_f, type: number, unit: degF, derived: "temp_c * 9 / 5 + 32"}}
      - {{name: heat_index, type: number, unit: degF,
          derived: "temp_f if temp_f < 80 else temp_f + 0.1 * (temp_f - 80)"}}
  - name: gps
    parameters:
      - {{name: lat, type: number, required: true, min: -90, max: 90}}
      - {{name: lon, type: number, required: true, min: -180, max: 180}}
"""


def demo_schema_text(tenant: str) -> str:
    """The demo schema file (YAML) for ``tenant``."""
    return _DEMO_SCHEMA.format(tenant=tenant)


def device_id(index: int) -> str:
    """The external id of simulated device number ``index``."""
    return f"sim-{index:05d}"


@dataclass(frozen=True, kw_only=True, slots=True)
class SimEnvelope:
    """One envelope to publish."""

    device: str
    topic: str
    msg_id: str
    payload: dict[str, Any]
    kind: str
    """``normal``, ``late``, ``invalid`` or ``unknown_topic`` (duplicates reuse an envelope)."""


class Station:
    """One simulated weather station: slowly drifting readings, a seq counter."""

    def __init__(self, index: int, rng: random.Random) -> None:
        self.device = device_id(index)
        self.seq = 0
        # A real device's message ids survive its restarts (boot id + counter); without the
        # boot part a second simulation would repeat the first one's ids and be all duplicates.
        self.boot: int | None = None
        self.phase = rng.uniform(0, 2 * math.pi)
        self.base_temp = rng.uniform(-5, 30)
        self.battery_mv = rng.uniform(3600, 4200)
        self.door = False

    def reading(self, ts_ms: int, rng: random.Random) -> dict[str, Any]:
        """The ``values`` of one normal measurement taken at ``ts_ms``."""
        self.battery_mv = max(3000.0, self.battery_mv - rng.uniform(0, 0.05))
        if rng.random() < 0.01:
            self.door = not self.door
        day = 2 * math.pi * (ts_ms / 86_400_000) + self.phase
        return {
            "temp": round(self.base_temp + 6 * math.sin(day) + rng.gauss(0, 0.3), 2),
            "rh": round(min(100.0, max(0.0, 55 + 20 * math.cos(day) + rng.gauss(0, 2))), 1),
            "pressure_pa": round(101_325 + rng.gauss(0, 300)),
            "bat_mv": round(self.battery_mv),
            "door": self.door,
            "wind": {"speed": round(abs(rng.gauss(3, 2)), 2), "dir": rng.randrange(0, 361)},
            "fw": "2.4.1",
        }

    def envelope(self, ts_ms: int, rng: random.Random, *, kind: str = "normal") -> SimEnvelope:
        """The next envelope of this station (``kind`` chooses a fault to inject)."""
        self.seq += 1
        if self.boot is None:
            self.boot = ts_ms
        values = self.reading(ts_ms, rng)
        topic = TOPIC
        if kind == "invalid":
            # Either the critical temperature is out of range or the required one is missing.
            if rng.random() < 0.5:
                values["temp"] = rng.choice([-99.0, 150.0])
            else:
                del values["temp"]
        elif kind == "unknown_topic":
            topic = UNKNOWN_TOPIC
        payload = {"ts": ts_ms, "seq": self.seq, "values": values}
        msg_id = f"{self.device}-{self.boot}-{self.seq}"
        return SimEnvelope(device=self.device, topic=topic, msg_id=msg_id, payload=payload,
                           kind=kind)


def choose_kind(rng: random.Random, *, late: float, invalid: float, unknown_topic: float) -> str:
    """Pick which fault (if any) the next envelope carries, by the configured shares."""
    draw = rng.random()
    for kind, share in (("late", late), ("invalid", invalid), ("unknown_topic", unknown_topic)):
        if draw < share:
            return kind
        draw -= share
    return "normal"
