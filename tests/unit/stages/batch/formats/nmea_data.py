"""The real receiver logs in ``shared/data/nmea`` (see ``tests/shared_data.py``)."""

from __future__ import annotations

from tests.shared_data import DATA_DIR, SharedFile, data_file

NMEA_DIR = DATA_DIR / "nmea"

#: Every log the folder holds; ``test_every_log_is_present`` keeps this list honest.
LOGS = (
    "bt451.log",
    "foretrex-201.log",
    "garmin-geko201.log",
    "haicom-305N.log",
    "navika-100-fix.log",
    "neo-m8n.log",
    "sirfstarv-nmea.log",
    "telit-he910.log",
    "ublox-zed-f9p-nmea.log",
)


def log(name: str) -> bytes:
    """The bytes of one receiver log (skips, or fails under CI, when the folder is absent)."""
    return data_file("nmea", name).read_bytes()


def lazy(name: str) -> SharedFile:
    """One receiver log, for a parametrize list: read when the test runs, not when collected."""
    return SharedFile(folder="nmea", name=name)
