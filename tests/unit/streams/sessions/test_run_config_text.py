"""One check for every run config, whichever way it arrives (no services): the CLI's
``--config`` and the API's upload field as JSON text, reprocess's body as an object."""

from __future__ import annotations

import pytest

from streams.errors import UsageError
from streams.sessions.notice import check_run_config, run_config_from_json


@pytest.mark.parametrize(
    ("text", "code", "detail"),
    [
        ('{"laps": {"min_lap_sx": 5}}', "INVALID_CONFIG",
         "invalid run config: config.laps.min_lap_sx: unknown key"),
        ('{"x\\u0000": null}', "INVALID_CONFIG",
         "invalid run config: config holds a NUL character"),
        ("[1]", "USAGE_ERROR", "--config must be a JSON object"),
        ("{", "USAGE_ERROR", "--config is not JSON"),
    ],
)  # fmt: skip
def test_a_config_text_is_refused_as_its_object_would_be(
    text: str, code: str, detail: str
) -> None:
    with pytest.raises(UsageError) as err:
        run_config_from_json(text, name="--config")
    assert err.value.code == code and str(err.value).startswith(detail)


def test_nul_is_refused_even_where_the_model_would_drop_it() -> None:
    # A key whose value is null counts as absent for the model, but the run stores the config
    # as given, and jsonb refuses NUL: the check refuses it, for every caller.
    with pytest.raises(UsageError) as err:
        check_run_config({"laps": None, "note\x00": None})
    assert err.value.code == "INVALID_CONFIG"
    assert run_config_from_json('{"laps": {"min_lap_s": 5}}') == {"laps": {"min_lap_s": 5}}
