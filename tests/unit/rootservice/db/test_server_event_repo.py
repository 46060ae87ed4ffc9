"""rootservice.db.server_event_repo: which of the RS's events happened on a server, and on
which ones (pure; the table is exercised in test_oceanbase_views.py)."""

from __future__ import annotations

from rootservice.db.event_repo import Event
from rootservice.db.server_event_repo import server_rows, split_server


def test_split_server_takes_ipv4_and_bracketed_ipv6_and_refuses_the_rest() -> None:
    assert split_server("10.0.0.1:2882") == ("10.0.0.1", 2882)
    assert split_server(" [::1]:2882 ") == ("::1", 2882)
    assert split_server("10.0.0.1") is None
    assert split_server("10.0.0.1:http") is None
    assert split_server(":2882") is None


def test_server_rows_one_per_named_server_only_for_server_events() -> None:
    rows = server_rows(
        [
            Event(
                7, "disaster_recovery", "change_member_list", (("removed", "1.1.1.1:1,[::2]:2"),)
            ),
            Event(8, "disaster_recovery", "change_member_list", (("removed", ""),)),
            Event(9, "disaster_recovery", "add_replica", (("to", "bad"),)),
            Event(10, "zone", "add_zone", (("zone", "z1"),)),
        ]
    )
    assert [(r["svr_ip"], r["svr_port"], r["event_time"]) for r in rows] == [
        ("1.1.1.1", 1, 7),
        ("::2", 2, 7),
    ]
    assert (rows[0]["name1"], rows[0]["value1"], rows[0]["name6"]) == (
        "removed",
        "1.1.1.1:1,[::2]:2",
        "",
    )
