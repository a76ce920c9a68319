"""The JSON form of a report: the same content as the HTML and Markdown forms."""

from __future__ import annotations

import json
from typing import Any


def render_json(content: dict[str, Any]) -> str:
    return json.dumps(content, ensure_ascii=False, indent=2) + "\n"
