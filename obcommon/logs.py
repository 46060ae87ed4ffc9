"""The one log format of the RootService and the observer agents.

Both ``rootservice serve`` and ``observer-agent`` call :func:`setup_logging`, so their lines
read alike and one ``grep`` / one log shipper handles both:

- ``text`` (default)::

      2025-01-02T03:04:05.123456Z INFO rs 127.0.0.1:2882 rootservice.servers.status: message

  the time in UTC with microseconds (ISO 8601, ``Z``), the level, the component (``rs`` or
  ``agent``), the process's address (``ip:port``; an agent's own lines carry the agent's,
  which matters when a test runs several agents in one process), the logger name, the message;
  an exception's traceback follows on the next lines.
- ``json``: one JSON object per line (python-json-logger's ``JsonFormatter``) with ``time``,
  ``level``, ``component``, ``address``, ``logger``, ``message``, every field the caller
  passed with ``extra=`` (e.g. ``server``, ``reason``, ``event``) and, for an exception,
  ``exc_info`` (the traceback as one string) inside the same object.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter

#: The values of ``--log-format``.
LOG_FORMATS = ("text", "json")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(component)s %(ob_server)s %(name)s: %(message)s"

# The record attributes of the JSON object, in order, and their names there.
_JSON_FIELDS = ("asctime", "levelname", "component", "ob_server", "name", "message")
_JSON_RENAMES = {
    "asctime": "time",
    "levelname": "level",
    "ob_server": "address",
    "name": "logger",
}


def utc_timestamp(created: float) -> str:
    """``created`` (seconds since the epoch, a ``LogRecord.created``) as
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ``: UTC, so lines of hosts in different zones sort together."""
    return dt.datetime.fromtimestamp(created, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ProcessFields(logging.Filter):
    """Adds ``component`` and ``ob_server`` (the address) to every record that has none, so the
    formats can name them; a record may carry its own ``ob_server`` (the agent's
    :class:`observer_agent.agent_log.AgentLog` does)."""

    def __init__(self, component: str, address: str) -> None:
        """``component``: ``rs`` or ``agent``; ``address``: ``ip:port`` of the process."""
        super().__init__()
        self.component = component
        self.address = address

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill the two fields; never drops a record."""
        if not hasattr(record, "component"):
            record.component = self.component
        if not hasattr(record, "ob_server"):
            record.ob_server = self.address
        return True


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT` with :func:`utc_timestamp` times."""

    def __init__(self) -> None:
        """The text format of the module docstring."""
        super().__init__(TEXT_FORMAT)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """The record's time by :func:`utc_timestamp`."""
        return utc_timestamp(record.created)


class JsonLineFormatter(JsonFormatter):
    """python-json-logger's formatter with the fields of the module docstring."""

    def __init__(self) -> None:
        """One object per record: the fixed fields renamed, then the ``extra=`` fields."""
        super().__init__(list(_JSON_FIELDS), rename_fields=dict(_JSON_RENAMES))

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """The record's time by :func:`utc_timestamp`."""
        return utc_timestamp(record.created)


def make_formatter(log_format: str) -> logging.Formatter:
    """The formatter of ``log_format`` (one of :data:`LOG_FORMATS`); raises ``ValueError``
    for another."""
    if log_format == "text":
        return TextFormatter()
    if log_format == "json":
        return JsonLineFormatter()
    raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")


def setup_logging(
    component: str,
    address: str,
    level: str | int = "INFO",
    log_format: str = "text",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Make the root logger write ``log_format`` lines to ``stream`` (stderr) at ``level``,
    replacing its handlers; returns the handler. Raises ``ValueError`` for an unknown format or
    level."""
    if isinstance(level, str):
        name = level.upper()
        if name not in logging.getLevelNamesMapping():
            raise ValueError(f"unknown log level {level!r}")
        level = logging.getLevelNamesMapping()[name]
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(ProcessFields(component, address))
    handler.setFormatter(make_formatter(log_format))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    return handler


def check_log_format(value: Any) -> str:
    """``value`` lower-cased when it is one of :data:`LOG_FORMATS` (a settings validator);
    raises ``ValueError`` otherwise."""
    text = str(value).strip().lower()
    if text not in LOG_FORMATS:
        raise ValueError(f"must be one of {', '.join(LOG_FORMATS)}, got {value!r}")
    return text
