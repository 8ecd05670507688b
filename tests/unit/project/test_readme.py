"""The README's configuration table names every setting with its real default."""

from __future__ import annotations

import re

from pydantic import BaseModel

from streams.config import Settings
from tests.conftest import REPO_ROOT


def _env_defaults() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, field in Settings.model_fields.items():
        default = field.default
        if isinstance(default, BaseModel):
            for sub, subfield in type(default).model_fields.items():
                value = subfield.default
                text = ", ".join(map(str, value)) if isinstance(value, tuple) else str(value)
                out[f"TIDEWAY_{name.upper()}__{sub.upper()}"] = text
        elif default is not None:
            out[f"TIDEWAY_{name.upper()}"] = str(default)
        else:
            out[f"TIDEWAY_{name.upper()}"] = ""
    return out


def test_every_setting_is_in_the_readme_with_its_default() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(TIDEWAY_[A-Z_]+)` \| `?([^|`]*)`? \|", readme, re.M))
    for env, default in _env_defaults().items():
        assert env in rows, f"{env} is missing from the README's configuration table"
        if default:
            assert rows[env] == default, f"{env}: README says {rows[env]!r}, code says {default!r}"
