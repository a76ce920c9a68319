"""Logging for the long-running commands: the text lines as before, or `--log-format
json`: one JSON object per line with the time, level, logger and message, and every
field a logging call passed as `extra=` (scheduler_core.logfields: business, partition,
epoch, fence, trigger_id, command_id, member) as a key of its own, so a log pipeline
filters on them. Standard library only: a formatter of a dozen lines needs no package."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
FORMATS = ("text", "json")
# what every LogRecord carries: anything else on a record came from `extra=`
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonLines(logging.Formatter):
    """One JSON object per record, on one line (a message's newlines are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_") and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str = "text") -> None:
    """The root logger's one handler (stderr) in `log_format`; a no-op when the root
    logger already has handlers (as `logging.basicConfig`, which it was before)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
