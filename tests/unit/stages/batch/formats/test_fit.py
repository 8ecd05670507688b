"""The FIT reader (fitdecode) against the ten real files in ``shared/data/fit``.

Expected values come from ``shared/data/fit/README.md`` (record counts, laps, what a reader
must do with each file).
"""

from __future__ import annotations

import math
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

from schemas import error_codes as codes
from stages.batch import parse_raw
from stages.batch.contract import SessionStageError, StageInput, StageOutput
from stages.batch.formats import compression, fit
from stages.batch.formats.sniff import sniff
from tests.shared_data import SharedFile
from tests.unit.stages.batch.sample_streams import blob

WAHOO = SharedFile(folder="fit", name="2019-02-17-062644-ELEMNT-297E-195-0.fit")
FENIX2 = SharedFile(folder="fit", name="activity-small-fenix2-run.fit")
EDGE820 = SharedFile(folder="fit", name="garmin-edge-820-bike.fit")
FENIX5 = SharedFile(folder="fit", name="garmin-fenix-5-run.fit")
STRYD = SharedFile(folder="fit", name="developer-types-sample.fit")
INDOOR = SharedFile(folder="fit", name="compressed-speed-distance.fit")
COROS = SharedFile(folder="fit", name="coros-pace-2-cycling-misaligned-fields.fit")
SETTINGS = SharedFile(folder="fit", name="Settings.fit")
EOF_CUT = SharedFile(folder="fit", name="activity-unexpected-eof.fit")
BAD_HEADER = SharedFile(folder="fit", name="activity-settings-corruptheader.fit")

ACTIVITIES = {  # file: (records, records with position, device laps)
    WAHOO: (13_471, 13_348, 1),
    FENIX2: (2_809, 2_809, 4),
    EDGE820: (15, 15, 1),
    FENIX5: (21, 21, 1),
    STRYD: (3_424, 3_424, 1),
    INDOOR: (755, 0, 11),
    COROS: (11_272, 10_305, 4),
}


def _parse(data: bytes, name: str = "ride.fit") -> StageOutput:
    return parse_raw.run(StageInput(artifacts=(blob(name, data),)))


@pytest.mark.parametrize("f", list(ACTIVITIES), ids=str)
def test_every_activity_is_recognised_and_read(f: SharedFile) -> None:
    data = f.read_bytes()
    found = sniff(data)
    assert found is not None and found.format == "fit"
    records, with_position, laps = ACTIVITIES[f]
    out = _parse(data)
    assert out.summary["format"] == "fit"
    reader = out.summary["readers"][0]
    assert (reader["records"], reader["records_with_position"]) == (records, with_position)
    assert len(out.summary["device_laps"]) == laps
    assert out.datasets["gnss"].num_rows == with_position


def test_positions_are_semicircles_converted_to_degrees() -> None:
    row = fit.read(FENIX5.read_bytes()).streams["gnss"].to_pylist()[0]
    assert row["lat_deg"] == pytest.approx(456099128 * 180 / 2**31)
    assert row["lon_deg"] == pytest.approx(-1463077077 * 180 / 2**31)
    assert -90 <= row["lat_deg"] <= 90 and -180 <= row["lon_deg"] <= 180
    assert row["alt_m"] == pytest.approx(2.2)  # enhanced_altitude
    assert row["speed_mps"] == 0.0  # enhanced_speed
    assert row["ts"].isoformat() == "2017-06-11T14:34:09+00:00"


def test_wahoo_ride_has_speed_heart_rate_and_lasts_hours() -> None:
    parsed = fit.read(WAHOO.read_bytes())
    gnss = parsed.streams["gnss"]
    ts = gnss.column("ts").to_pylist()
    # a 3.7-hour ride at 1 Hz (13,348 fixes), spread over more wall time by pauses
    assert (ts[-1] - ts[0]).total_seconds() > 3.7 * 3600
    speeds = [s for s in gnss.column("speed_mps").to_pylist() if s is not None]
    assert speeds and 5 < max(speeds) < 30  # m/s, a bike
    channels = set(parsed.streams["aux"].column("channel").to_pylist())
    assert "heart_rate" in channels


def test_developer_fields_are_ignored() -> None:
    parsed = fit.read(STRYD.read_bytes())
    channels = set(parsed.streams["aux"].column("channel").to_pylist())
    assert channels <= {"heart_rate", "cadence", "power", "temperature"}


def test_misaligned_field_sizes_are_tolerated() -> None:
    parsed = fit.read(COROS.read_bytes())
    assert parsed.stats["decoder_warnings"] > 0
    assert parsed.streams["gnss"].num_rows == 10_305


def test_indoor_activity_without_position_is_a_gating_outcome_not_a_crash() -> None:
    out = _parse(INDOOR.read_bytes())
    assert out.datasets["gnss"].num_rows == 0
    assert out.summary["gnss_fix"] is False
    assert out.summary["gnss_fix_reason"] == "NO_POSITION_DATA"
    assert out.datasets["aux"].num_rows > 0  # heart rate is still read
    # Its timestamps count from the device's power-on, not the FIT epoch: flagged as such.
    assert out.summary["readers"][0]["relative_timestamps"] == 755
    laps = out.summary["device_laps"]
    assert [round(lap["total_distance"]) for lap in laps[:3]] == [1000, 1000, 1000]
    assert not any(math.isnan(lap["total_elapsed_time"]) for lap in laps)


def test_gzipped_fit_is_read() -> None:
    data = FENIX5.read_bytes()
    out = _parse(compression.compress(data), "run.fit.gz")
    assert out.summary["format"] == "fit"
    assert out.datasets["gnss"].num_rows == 21


@pytest.mark.parametrize(
    ("f", "code"),
    [
        (SETTINGS, codes.FIT_NOT_ACTIVITY),
        (BAD_HEADER, codes.FIT_CORRUPT),
    ],
    ids=str,
)
def test_refused_files_end_in_their_own_code(f: SharedFile, code: str) -> None:
    with pytest.raises(SessionStageError) as err:
        _parse(f.read_bytes())
    assert err.value.code == code


def test_a_file_cut_off_in_its_last_message_is_read_up_to_the_cut() -> None:
    """Issue 32 item 7: a file cut off in its last message was refused whole. Its 14 records
    are read; the reader and parse_raw say it is truncated, where and what is missing."""
    data = EOF_CUT.read_bytes()
    parsed = fit.read(data)
    assert parsed.streams["gnss"].num_rows == 14
    assert parsed.stats["truncated"] is True
    assert parsed.stats["cut_at_byte"] == len(data) == 768
    assert parsed.stats["missing_bytes"] == 3  # the header promised 771 bytes with the CRC
    out = _parse(data, EOF_CUT.name)
    assert out.summary["truncated"] == [EOF_CUT.name]
    assert out.summary["notes"] == [
        f"{EOF_CUT.name} is cut off at byte 768 (3 bytes missing): read up to the cut, 14 records"
    ]
    whole = _parse(FENIX5.read_bytes())
    assert whole.summary["truncated"] == [] and whole.summary["notes"] == []
    assert whole.summary["readers"][0]["truncated"] is False


def test_a_long_ride_cut_in_the_middle_keeps_what_came_before() -> None:
    data = WAHOO.read_bytes()
    cut = fit.read(data[: len(data) // 2])
    rows = cut.streams["gnss"].num_rows
    assert 0 < rows < 13_348 and cut.stats["truncated"] is True
    assert cut.stats["missing_bytes"] == len(data) - len(data) // 2
    whole = fit.read(data).streams["gnss"]
    assert cut.streams["gnss"].to_pylist() == whole.slice(0, rows).to_pylist()


def test_a_file_cut_before_its_first_record_is_corrupt() -> None:
    data = FENIX5.read_bytes()
    with pytest.raises(SessionStageError) as err:
        fit.read(data[:40])
    assert err.value.code == codes.FIT_CORRUPT
    assert "before its first record" in err.value.message


def test_speed_on_records_without_a_position_is_kept() -> None:
    """Issue 32 item 7: records without a position dropped their speed (754 values of the
    indoor file, 942 of the Coros ride). They are the AUX channel ``speed`` (m/s)."""
    for f, count in ((INDOOR, 754), (COROS, 942)):
        parsed = fit.read(f.read_bytes())
        aux = parsed.streams["aux"].to_pylist()
        speeds = [row["value"] for row in aux if row["channel"] == fit.SPEED]
        assert len(speeds) == parsed.stats["speed_without_position"] == count, f
        assert min(speeds) >= 0 and 1 < max(speeds) < 30, f  # m/s, a runner or a bike
    # A record with a position keeps its speed in GNSS, not twice.
    parsed = fit.read(FENIX2.read_bytes())
    assert fit.SPEED not in set(parsed.streams["aux"].column("channel").to_pylist())


def _fit_with_hr_messages() -> bytes:
    """A FIT activity whose heart rate is in ``hr`` messages only, as swim files have it: an
    anchor (timestamp + one event), eight values packed as 12-bit event deltas crossing a
    4096-tick boundary, then two with full event timestamps."""
    import datetime as dt

    from garmin_fit_sdk import Encoder, Profile

    mesg = {str(name): int(num) for num, name in Profile["types"]["mesg_num"].items()}
    t0 = dt.datetime(2021, 5, 1, 9, 0, tzinfo=dt.UTC)
    enc = Encoder()
    enc.write_mesg(
        {
            "mesg_num": mesg["file_id"],
            "type": "activity",
            "time_created": t0,
            "manufacturer": "development",
            "product": 0,
            "serial_number": 1,
        }
    )
    for k in range(10):
        enc.write_mesg(
            {
                "mesg_num": mesg["record"],
                "timestamp": t0 + dt.timedelta(seconds=k),
                "distance": 1.5 * k,
            }
        )
    enc.write_mesg(
        {
            "mesg_num": mesg["hr"],
            "timestamp": t0,
            "fractional_timestamp": 0.5,
            "event_timestamp": [4095.0],
            "filtered_bpm": [100],
        }
    )
    ticks = [round((4095.0 + 0.75 * (k + 1)) * 1024) for k in range(8)]
    packed = sum((tick & 0xFFF) << (12 * i) for i, tick in enumerate(ticks))
    enc.write_mesg(
        {
            "mesg_num": mesg["hr"],
            "filtered_bpm": [101 + k for k in range(8)],
            "event_timestamp_12": list(packed.to_bytes(12, "little")),
        }
    )
    enc.write_mesg(
        {"mesg_num": mesg["hr"], "event_timestamp": [4102.0, 4103.0], "filtered_bpm": [120, 121]}
    )
    return bytes(enc.close())


def test_heart_rate_in_hr_messages_is_read() -> None:
    """Issue 32 item 7: swim files keep heart rate in ``hr`` messages, which were dropped."""
    parsed = fit.read(_fit_with_hr_messages())
    assert parsed.stats["hr_values"] == 11
    rows = [r for r in parsed.streams["aux"].to_pylist() if r["channel"] == "heart_rate"]
    offsets = [round(r["ts"].timestamp() - rows[0]["ts"].timestamp(), 3) for r in rows]
    # anchor at 09:00:00.5; then every 0.75 s of device time; then 1 s apart
    assert rows[0]["ts"].isoformat() == "2021-05-01T09:00:00.500000+00:00"
    assert offsets == [0.0, 0.75, 1.5, 2.25, 3.0, 3.75, 4.5, 5.25, 6.0, 7.0, 8.0]
    assert [r["value"] for r in rows] == [100, *range(101, 109), 120, 121]


def test_relative_timestamps_are_dated_by_the_session_date() -> None:
    """Issue 32 item 7: a FIT file with relative timestamps was dated 1990 with no way to give
    the real date. ``session_date`` (the upload's ``--date``) puts its start at midnight UTC
    of that day, every interval kept; without it the summary says how to give one."""
    import datetime as dt

    data = INDOOR.read_bytes()
    undated = _parse(data, INDOOR.name)
    assert undated.summary["readers"][0]["dated_from"] == "fit_epoch"
    assert "--date YYYY-MM-DD" in undated.summary["notes"][0]
    dated = parse_raw.run(
        StageInput(artifacts=(blob(INDOOR.name, data),), config={"session_date": "2015-03-01"})
    )
    assert dated.summary["readers"][0]["dated_from"] == "session_date"
    assert dated.summary["notes"] == []
    before = undated.datasets["aux"].column("ts").to_pylist()
    after = dated.datasets["aux"].column("ts").to_pylist()
    assert [b - before[0] for b in before] == [a - after[0] for a in after]
    # The earliest time in the file (the first device lap starts 5 s before the first record)
    # is midnight UTC of the given day.
    laps = dated.summary["device_laps"]
    midnight = dt.datetime(2015, 3, 1, tzinfo=dt.UTC)
    assert laps[0]["start_us"] == int(midnight.timestamp()) * 1_000_000
    assert after[0] == midnight + dt.timedelta(seconds=5)
    # A file with real dates ignores the session date.
    fenix = FENIX5.read_bytes()
    kept = fit.read(fenix, session_date=dt.date(2015, 3, 1)).streams["gnss"]
    assert kept.column("ts").to_pylist() == fit.read(fenix).streams["gnss"].column("ts").to_pylist()


def test_a_bad_crc_is_corrupt() -> None:
    data = bytearray(FENIX5.read_bytes())
    data[-1] ^= 0xFF  # the file CRC
    with pytest.raises(SessionStageError) as err:
        fit.read(bytes(data))
    assert err.value.code == codes.FIT_CORRUPT


def test_the_refusal_codes_are_not_retried() -> None:
    from stages.jobs import dag

    for code in (codes.FIT_CORRUPT, codes.FIT_NOT_ACTIVITY, codes.NO_SESSION_DATE):
        assert code in dag._BAD_INPUT
        assert not codes.CODES[code].retriable


def test_writer_round_trip_resamples_to_whole_seconds() -> None:
    import numpy as np
    import pyarrow as pa

    from stages.batch import formats
    from stages.batch.synth import synthesize

    session = synthesize(laps=1, imu_hz=50, gnss_hz=10, seed=1)
    data = formats.write("fit", {"gnss": session.gnss, "imu": session.imu})
    assert fit.is_fit(data[:12])
    got = fit.read(data).streams["gnss"]
    ts = got.column("ts").cast(pa.int64()).to_numpy()
    assert got.num_rows > 10 and (ts % 1_000_000 == 0).all()
    assert (np.diff(ts) == 1_000_000).all()
    src_ts = session.gnss.column("ts").cast(pa.int64()).to_numpy().astype(float)
    for col, tol in (("lat_deg", 1e-6), ("lon_deg", 1e-6), ("speed_mps", 1e-3)):
        want = np.interp(ts.astype(float), src_ts, session.gnss.column(col).to_numpy())
        assert np.abs(got.column(col).to_numpy() - want).max() <= tol, col


def test_fit_is_held_to_the_size_limits() -> None:
    data = FENIX2.read_bytes()
    for upload in (data, compression.compress(data)):
        with pytest.raises(SessionStageError) as err:
            parse_raw.run(
                StageInput(
                    artifacts=(blob("run.fit", upload),),
                    config={"max_artifact_bytes": 1000, "max_decompressed_bytes": 1000},
                )
            )
        assert err.value.code == codes.TOO_LARGE


def test_writing_fit_without_the_optional_encoder_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Garmin's encoder is an optional extra (its licence is not an OSI one); reading never
    # needs it, and writing without it says which extra to install.
    import sys

    monkeypatch.setitem(sys.modules, "garmin_fit_sdk", None)
    monkeypatch.delitem(sys.modules, "stages.batch.formats.fit_writer", raising=False)
    with pytest.raises(SessionStageError) as raised:
        fit.write({})
    assert raised.value.code == "CONFIG_ERROR"
    assert "tideway[fit-writer]" in raised.value.message


def test_files_read_at_once_in_threads_count_their_own_warnings() -> None:
    """The worker runs stages in threads. Counting the decoder's warnings swaps the
    process-wide warning filters; two reads at once used to restore each other's filters
    mid-read, so a warning escaped one read's count (and, under this suite's
    ``filterwarnings = error``, raised inside the other read: STAGE_CRASHED once in a full
    run)."""
    data = COROS.read_bytes()
    alone = fit.read(data).stats["decoder_warnings"]
    assert alone > 0  # the file this is about warns
    barrier = threading.Barrier(4)

    def read_after_the_others_start() -> int:
        barrier.wait()
        return int(fit.read(data).stats["decoder_warnings"])

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escapes a read fails it
        with ThreadPoolExecutor(4) as pool:
            counts = list(pool.map(lambda _: read_after_the_others_start(), range(4)))
    assert counts == [alone] * 4
