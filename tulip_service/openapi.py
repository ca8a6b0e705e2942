"""The service's OpenAPI document, as checked in at ``docs/openapi.json``.

``python -m tulip_service.openapi docs/openapi.json`` rewrites it after a deliberate
change of the API (``tests/service/test_openapi.py`` fails while they differ).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def document() -> dict[str, Any]:
    from tulip_service.app import create_app
    from tulip_service.settings import ServiceSettings

    return create_app(lambda: None, ServiceSettings()).openapi()  # type: ignore[arg-type, return-value]


def text() -> str:
    return json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(text(), encoding="utf-8")
