"""``python -m streams.api > docs/openapi.json``: write the API's OpenAPI document."""

import sys

from streams.api.openapi import document, dumps
from streams.api.routes import ROUTES

sys.stdout.buffer.write(dumps(document(ROUTES)))
