"""The one log format of the RS and the agents (obcommon/logs.py): text with
UTC microseconds, component and address; JSON with the same fields, extras and exceptions
inside the object."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from obcommon.logs import check_log_format, setup_logging

TEXT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z INFO rs 127\.0\.0\.1:2882 "
    r"rootservice\.servers\.status: server 10\.0\.0\.1:2882 is INACTIVE$"
)


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_text_format(restore_root: None) -> None:
    out = io.StringIO()
    setup_logging("rs", "127.0.0.1:2882", "INFO", "text", stream=out)
    logging.getLogger("rootservice.servers.status").info(
        "server %s is INACTIVE", "10.0.0.1:2882", extra={"server": "10.0.0.1:2882"}
    )
    logging.getLogger("rootservice.servers.status").debug("below the level")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and TEXT_LINE.match(lines[0]), lines


def test_json_format_fields_extras_and_exception(restore_root: None) -> None:
    out = io.StringIO()
    setup_logging("agent", "127.0.0.1:3882", "DEBUG", "json", stream=out)
    lg = logging.getLogger("observer_agent")
    lg.info("lease granted", extra={"server": "127.0.0.1:3882", "reason": "x", "event": "e"})
    # A record that carries its own address (AgentLog does) keeps it.
    lg.warning("other agent", extra={"ob_server": "127.0.0.1:4882"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        lg.exception("failed")
    objs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(objs) == 3  # one object per line, the traceback inside it
    first = objs[0]
    assert {k: first[k] for k in ("level", "component", "address", "logger", "message")} == {
        "level": "INFO",
        "component": "agent",
        "address": "127.0.0.1:3882",
        "logger": "observer_agent",
        "message": "lease granted",
    }
    assert (first["server"], first["reason"], first["event"]) == ("127.0.0.1:3882", "x", "e")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", first["time"])
    assert objs[1]["address"] == "127.0.0.1:4882"
    assert objs[2]["level"] == "ERROR" and "RuntimeError: boom" in objs[2]["exc_info"]


def test_bad_format_and_level_are_refused(restore_root: None) -> None:
    assert check_log_format(" JSON ") == "json"
    with pytest.raises(ValueError, match="text, json"):
        check_log_format("xml")
    with pytest.raises(ValueError):
        setup_logging("rs", "-", "LOUD", "text", stream=io.StringIO())
