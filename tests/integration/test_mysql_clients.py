"""Real MySQL clients against a real secure RS with agents: the ``mariadb`` CLI,
PyMySQL, mysql-connector-python and MariaDB Connector/J (a tiny Java program compiled at
test time) log in over TLS, run the admin statements and get OceanBase's and MySQL's error
numbers; plaintext is refused (3159), a wrong password is refused (1045) with nothing
changed, a read-only user is refused on ALTER SYSTEM (1227).

One cluster (SQLite, one RS, three agents) serves the module; the tests that change the
whitelist check what they changed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mysql.connector
import pymysql
import pytest

from obcommon.security.certs import CA_CERT, Role, cert_file, key_file
from tests.integration.test_cluster import Cluster
from tests.support import pki
from tests.support.cluster import ProcSet, wait_until
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

OPS, OPS_PW = "ops", "ops-Secret1"
READER, READER_PW = "reader", "reader-Secret1"
JAR = Path("/usr/share/java/mariadb-java-client.jar")


class MyCluster(Cluster):
    mysql_port: int = 0


@pytest.fixture(scope="module")
def c(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MyCluster]:
    tmp = tmp_path_factory.mktemp("mysql")
    procs = ProcSet(tmp / "logs")
    cl = MyCluster(procs, tmp, f"sqlite:///{tmp}/rs.db")
    cl.mysql_port = free_port()
    try:
        cl.start_rs(mysql_addr=f"127.0.0.1:{cl.mysql_port}")
        cl.bootstrap(2)
        cl.ok(f"CREATE USER {OPS} IDENTIFIED BY '{OPS_PW}'")
        cl.ok(f"GRANT SELECT, ALTER SYSTEM ON *.* TO {OPS}")
        cl.ok(f"CREATE USER {READER} IDENTIFIED BY '{READER_PW}'")
        cl.ok(f"GRANT SELECT ON *.* TO {READER}")
        yield cl
    finally:
        errors = procs.stop_all()
        assert not errors, errors


def ca() -> str:
    return str(pki.client_certs() / CA_CERT)


def pymysql_conn(c: MyCluster, user: str, password: str, **kw: Any) -> pymysql.Connection:
    kw.setdefault("ssl", {"ca": ca()})
    return pymysql.connect(
        host="127.0.0.1", port=c.mysql_port, user=user, password=password, connect_timeout=10, **kw
    )


def pymysql_error(c: MyCluster, sql: str, user: str = OPS, pw: str = OPS_PW) -> int:
    with (
        pymysql_conn(c, user, pw) as conn,
        conn.cursor() as cur,
        pytest.raises(pymysql.MySQLError) as e,
    ):
        cur.execute(sql)
    return int(e.value.args[0])


def mariadb(c: MyCluster, sql: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("mariadb") or shutil.which("mysql")
    if exe is None:
        pytest.fail("no mariadb client: apt-get install -y mariadb-client", pytrace=False)
    cmd = [exe, "-h", "127.0.0.1", "-P", str(c.mysql_port), "--batch", *args, "-e", sql]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def root_cert_flags() -> list[str]:
    d = pki.client_certs()
    return [
        "-u",
        "root",
        f"--ssl-ca={d / CA_CERT}",
        f"--ssl-cert={d / cert_file(Role.CLIENT, 'root')}",
        f"--ssl-key={d / key_file(Role.CLIENT, 'root')}",
    ]


def whitelist(c: MyCluster) -> dict[str, str]:
    return c.statuses()


def members(c: MyCluster) -> set[str]:
    """The servers of the whitelist: what a refused statement must leave unchanged (their
    heartbeat status may move meanwhile: a loaded machine delays a heartbeat past the 2 s
    lease, and a CI run saw one server go INACTIVE then ACTIVE across a refusal)."""
    return set(c.statuses())


# --------------------------------------------------------------------------- logins


def test_plaintext_is_refused_3159(c: MyCluster) -> None:
    with pytest.raises(pymysql.MySQLError) as e:
        # PyMySQL >= 1.2 upgrades to TLS when the server offers it unless told not to.
        pymysql_conn(c, OPS, OPS_PW, ssl=None, ssl_disabled=True)
    assert e.value.args[0] == 3159
    r = mariadb(c, "SELECT 1", "-u", OPS, f"-p{OPS_PW}", "--skip-ssl")
    assert r.returncode == 1 and "ERROR 3159" in r.stderr


def test_wrong_password_is_refused_1045_and_nothing_changes(c: MyCluster) -> None:
    before = members(c)
    refused = c.metrics().get("logins_refused_total", 0)
    with pytest.raises(pymysql.MySQLError) as e:
        pymysql_conn(c, OPS, "wrong")
    assert e.value.args[0] == 1045 and "using password: YES" in e.value.args[1]
    r = mariadb(
        c,
        "ALTER SYSTEM ADD SERVER '127.0.0.9:1' ZONE 'z1'",
        "-u",
        OPS,
        "-pwrong",
        f"--ssl-ca={ca()}",
    )
    assert "ERROR 1045" in r.stderr
    assert members(c) == before
    assert c.metrics()["logins_refused_total"] >= refused + 2


def test_certificate_login_and_client_chatter_with_mariadb_cli(c: MyCluster) -> None:
    r = mariadb(
        c,
        "SELECT @@version_comment; SELECT DATABASE(); USE oceanbase; SELECT DATABASE(); "
        "SET NAMES utf8mb4; SET autocommit=1; SHOW VARIABLES LIKE 'version'; SELECT 1; "
        "SHOW GRANTS; SHOW PARAMETERS LIKE 'lease_time'",
        *root_cert_flags(),
    )
    assert r.returncode == 0, r.stderr
    assert "OceanBase" in r.stdout and "oceanbase" in r.stdout and "lease_time" in r.stdout
    assert "GRANT ALL PRIVILEGES ON *.* TO 'root'" in r.stdout
    bad_db = mariadb(c, "USE nope", *root_cert_flags())
    assert "ERROR 1049" in bad_db.stderr


# --------------------------------------------------------------------------- statements


def test_add_and_delete_server_with_each_client(c: MyCluster, tmp_path: Path) -> None:
    a3 = c.start_agent("z1")
    a4 = c.start_agent("z2")
    # mariadb CLI: ADD SERVER, then the same again refused with OceanBase's number.
    r = mariadb(
        c, f"ALTER SYSTEM ADD SERVER '{a3}' ZONE 'z1'", "-u", OPS, f"-p{OPS_PW}", f"--ssl-ca={ca()}"
    )
    assert r.returncode == 0, r.stderr
    r = mariadb(
        c, f"ALTER SYSTEM ADD SERVER '{a3}' ZONE 'z1'", "-u", OPS, f"-p{OPS_PW}", f"--ssl-ca={ca()}"
    )
    assert "ERROR 4017 (HY000)" in r.stderr and "OB_ENTRY_EXIST" in r.stderr, r.stderr
    # PyMySQL: ADD SERVER with affected rows; a server not in the whitelist refused (4630).
    with pymysql_conn(c, OPS, OPS_PW) as conn, conn.cursor() as cur:
        assert cur.execute(f"ALTER SYSTEM ADD SERVER '{a4}' ZONE 'z2'") == 1
    assert pymysql_error(c, "ALTER SYSTEM DELETE SERVER '127.0.0.9:1'") == 4630
    wait_until(lambda: whitelist(c).get(a4) == "ACTIVE", 20, message="a4 ACTIVE")
    # mysql-connector-python: DELETE SERVER (a job), the whitelist shows it deleting.
    conn2 = mysql.connector.connect(
        host="127.0.0.1",
        port=c.mysql_port,
        user=OPS,
        password=OPS_PW,
        ssl_ca=ca(),
        database="oceanbase",
        connection_timeout=10,
    )
    try:
        cur2 = conn2.cursor()
        cur2.execute(f"ALTER SYSTEM DELETE SERVER '{a4}'")
        assert cur2.rowcount == 1
        with pytest.raises(mysql.connector.Error) as e:
            cur2.execute("ALTER SYSTEM NONSENSE")
        assert e.value.errno == 1064 and e.value.sqlstate == "42000"
        cur2.execute("SHOW PARAMETERS LIKE 'lease_time'")
        assert cur2.fetchall()[0][4] == "lease_time"  # zone, svr_type, svr_ip, svr_port, name
    finally:
        conn2.close()
    # A server holding no unit is emptied at once: DELETING, or already gone.
    assert whitelist(c).get(a4) in ("DELETING", None)


def test_refused_zone_statements_carry_oceanbases_numbers(c: MyCluster) -> None:
    """Through PyMySQL: a new zone is INACTIVE, so STOP ZONE of another zone
    is refused with 4660 and OceanBase's message; the refusals change nothing."""
    with pymysql_conn(c, OPS, OPS_PW) as conn, conn.cursor() as cur:
        cur.execute("ALTER SYSTEM ADD ZONE 'zx'")
        with pytest.raises(pymysql.MySQLError) as e:
            cur.execute("ALTER SYSTEM STOP ZONE 'z1'")
        assert e.value.args == (
            4660,
            "OB_STOP_SERVER_IN_MULTIPLE_ZONES: cannot stop server or stop zone in multiple zones",
        )
        for sql, errno in [
            ("ALTER SYSTEM STOP ZONE 'nozone'", 4018),
            ("ALTER SYSTEM START ZONE 'z1'", 4633),
            ("ALTER SYSTEM DELETE ZONE 'z1'", 4668),
            ("ALTER SYSTEM ADD ZONE 'zx'", 4017),
        ]:
            with pytest.raises(pymysql.MySQLError) as e:
                cur.execute(sql)
            assert e.value.args[0] == errno, sql
        cur.execute("ALTER SYSTEM DELETE ZONE 'zx'")
        cur.execute("SELECT zone, status FROM DBA_OB_ZONES ORDER BY zone")
        assert cur.fetchall() == (("z1", "ACTIVE"), ("z2", "ACTIVE"))


def test_read_only_user_is_refused_on_alter_system_1227(c: MyCluster) -> None:
    before = members(c)
    assert (
        pymysql_error(c, "ALTER SYSTEM ADD SERVER '127.0.0.9:1' ZONE 'z1'", READER, READER_PW)
        == 1227
    )
    with pymysql_conn(c, READER, READER_PW) as conn, conn.cursor() as cur:
        cur.execute("SELECT svr_ip, svr_port FROM __all_server")
        assert len(cur.fetchall()) == len(before)
        assert [d[0] for d in cur.description] == ["svr_ip", "svr_port"]
    assert members(c) == before


def test_caching_sha2_for_a_user_without_native_verifier(c: MyCluster) -> None:
    import sqlite3

    db = sqlite3.connect(str(c.tmp / "rs.db"))
    try:
        db.execute("UPDATE __all_user SET native_passwd = NULL WHERE user_name = ?", (READER,))
        db.commit()
    finally:
        db.close()
    for _ in range(2):  # full authentication over TLS, then the fast path
        with pymysql_conn(c, READER, READER_PW) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchall() == ((1,),)


# --------------------------------------------------------------------------- read-only SQL

GROUP_BY = "SELECT zone, count(*) AS n FROM DBA_OB_SERVERS GROUP BY zone ORDER BY zone"
JOIN = (
    "SELECT count(*) AS n FROM __all_server s JOIN DBA_OB_ZONES z ON s.zone = z.zone "
    "WHERE z.status = 'ACTIVE'"
)


def expected_reads(c: MyCluster) -> tuple[list[tuple[str, int]], int]:
    """The GROUP BY and the join's answers read from the database file itself."""
    import sqlite3

    db = sqlite3.connect(str(c.tmp / "rs.db"))
    try:
        by_zone = db.execute(
            "SELECT zone, count(*) FROM __all_server GROUP BY zone ORDER BY zone"
        ).fetchall()
        (joined,) = db.execute(
            "SELECT count(*) FROM __all_server s, __all_zone z "
            "WHERE z.zone = s.zone AND z.name = 'status' AND z.info = 'ACTIVE'"
        ).fetchone()
    finally:
        db.close()
    return [(str(z), int(n)) for z, n in by_zone], int(joined)


def test_group_by_join_show_tables_desc_with_pymysql(c: MyCluster) -> None:
    by_zone, joined = expected_reads(c)
    with pymysql_conn(c, READER, READER_PW, database="oceanbase") as conn, conn.cursor() as cur:
        cur.execute(GROUP_BY)
        assert [(z, int(n)) for z, n in cur.fetchall()] == by_zone
        assert [d[0] for d in cur.description] == ["zone", "n"]
        cur.execute(JOIN)
        assert cur.fetchall() == ((joined,),)
        cur.execute("SHOW TABLES")
        tables = [r[0] for r in cur.fetchall()]
        assert "__all_server" in tables and "DBA_OB_SERVERS" in tables
        cur.execute("DESC __all_server")
        assert [r[0] for r in cur.fetchall()][:2] == ["svr_ip", "svr_port"]
        # OceanBase's GV$ names (a '$' in the name) read over the MySQL protocol.
        assert {"GV$OB_SERVERS", "V$OB_SERVERS", "GV$OB_LOG_STAT"} <= set(tables)

        def servers() -> set[tuple[str, int, str]]:
            cur.execute(
                "SELECT SVR_IP, SVR_PORT, DATA_DISK_HEALTH_STATUS FROM oceanbase.GV$OB_SERVERS"
            )
            return {(ip, int(port), health) for ip, port, health in cur.fetchall()}

        wait_until(lambda: len(servers()) >= 2, 15, message="GV$OB_SERVERS over PyMySQL")
        assert {health for *_, health in servers()} == {"NORMAL"}


def test_group_by_join_show_tables_desc_with_mariadb_cli(c: MyCluster) -> None:
    by_zone, joined = expected_reads(c)
    flags = ["-u", READER, f"-p{READER_PW}", f"--ssl-ca={ca()}", "-D", "oceanbase", "-N"]
    r = mariadb(c, f"{GROUP_BY}; {JOIN}; SHOW TABLES; DESC __all_server", *flags)
    assert r.returncode == 0, r.stderr
    lines = [ln.split("\t") for ln in r.stdout.splitlines()]
    k = len(by_zone)
    assert [(z, int(n)) for z, n in lines[:k]] == by_zone
    assert lines[k] == [str(joined)]
    assert ["__all_server"] in lines and ["DBA_OB_SERVERS"] in lines
    assert any(ln[:2] == ["svr_ip", "varchar(46)"] for ln in lines)  # DESC


def test_group_by_join_show_tables_desc_with_connector_python(c: MyCluster) -> None:
    by_zone, joined = expected_reads(c)
    conn = mysql.connector.connect(
        host="127.0.0.1",
        port=c.mysql_port,
        user=READER,
        password=READER_PW,
        ssl_ca=ca(),
        database="oceanbase",
        connection_timeout=10,
    )
    try:
        cur = conn.cursor()
        cur.execute(GROUP_BY)
        assert [(z, int(n)) for z, n in cur.fetchall()] == by_zone
        cur.execute(JOIN)
        assert cur.fetchall() == [(joined,)]
        cur.execute("SHOW TABLES")
        assert ("__all_server",) in cur.fetchall()
        cur.execute("DESC __all_server")
        assert cur.fetchall()[0][:2] == ("svr_ip", "varchar(46)")
    finally:
        conn.close()


FORBIDDEN = [
    # (statement, MySQL error number the client must report)
    ("SELECT pg_sleep(5)", 1235),
    ("SELECT sleep(5)", 1235),
    ("SELECT load_extension('/tmp/x.so')", 1235),
    ("SELECT set_config('statement_timeout', '0', false)", 1235),
    ("SELECT benchmark(100000000, md5('x'))", 1235),
    ("SELECT * FROM sqlite_master", 1146),
    ("SELECT * FROM pg_catalog.pg_user", 1146),  # OB_TABLE_NOT_EXIST: ER_NO_SUCH_TABLE
    ("SELECT * FROM mysql.user", 1146),
    ("SELECT * FROM __all_user", 1146),
    ("SELECT 1; DROP TABLE __all_server", 1064),
    ("WITH d AS (DELETE FROM __all_server RETURNING *) SELECT * FROM d", 1235),
    ("SELECT * FROM __all_server FOR UPDATE", 1235),
    ("SELECT * FROM __all_server INTO OUTFILE '/tmp/x'", 1064),
    ("INSERT INTO __all_zone SELECT * FROM __all_zone", 1064),
    ("UPDATE __all_server SET status = 'ACTIVE'", 1064),
    ("DELETE FROM __all_server", 1064),
    ("DROP TABLE __all_server", 1064),
]


def _table_counts(c: MyCluster) -> dict[str, int]:
    import sqlite3

    db = sqlite3.connect(str(c.tmp / "rs.db"))
    try:
        names = [
            r[0]
            for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        ]
        return {n: db.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        db.close()


@pytest.mark.parametrize("user,pw", [(OPS, OPS_PW), ("root", None)])
def test_every_forbidden_select_shape_is_refused_and_changes_nothing(
    c: MyCluster, user: str, pw: str | None
) -> None:
    before = _table_counts(c)
    servers = members(c)
    got = {}
    if pw is None:  # root: every privilege, certificate login
        d = pki.client_certs()
        ssl = {
            "ca": str(d / CA_CERT),
            "cert": str(d / cert_file(Role.CLIENT, "root")),
            "key": str(d / key_file(Role.CLIENT, "root")),
        }
        conn = pymysql_conn(c, "root", "", ssl=ssl)
    else:
        conn = pymysql_conn(c, user, pw)
    with conn, conn.cursor() as cur:
        for sql, _ in FORBIDDEN:
            try:
                cur.execute(sql)
                got[sql] = 0
            except pymysql.MySQLError as e:
                got[sql] = int(e.args[0])
    assert got == dict(FORBIDDEN)
    audit = [k for k in before if "event_history" in k]  # refusals may be audited
    after = _table_counts(c)
    assert {k: v for k, v in after.items() if k not in audit} == {
        k: v for k, v in before.items() if k not in audit
    }
    assert members(c) == servers


def test_prepared_statements_with_connector_python(c: MyCluster) -> None:
    """COM_STMT_PREPARE / EXECUTE: parameters bound, refusals with their numbers, and no
    ERROR line in the RS log for a refused statement (it is the client's error)."""
    conn = mysql.connector.connect(
        host="127.0.0.1",
        port=c.mysql_port,
        user=OPS,
        password=OPS_PW,
        ssl_ca=ca(),
        database="oceanbase",
        connection_timeout=10,
    )
    try:
        cur = conn.cursor(prepared=True)
        cur.execute("SELECT count(*) FROM __all_server WHERE zone = ?", ("z1",))
        (n,) = cur.fetchone()
        assert n == dict(expected_reads(c)[0]).get("z1", 0) > 0
        with pytest.raises(mysql.connector.Error) as e:
            cur.execute("ALTER SYSTEM DELETE SERVER '127.0.0.9:1'")
        assert e.value.errno == 4630
        with pytest.raises(mysql.connector.Error) as e:
            cur.execute("SELECT sleep(1) FROM __all_server")
        assert e.value.errno == 1235
    finally:
        conn.close()
    assert not any(
        " ERROR rs " in line and "mysql_mimic" in line for line in c.rs.log_text().splitlines()
    )


def test_bootstrap_over_the_mysql_protocol(tmp_path: Path) -> None:
    """A fresh RS bootstrapped by the mariadb CLI (root's client certificate, TLS)."""
    procs = ProcSet(tmp_path / "logs")
    cl = MyCluster(procs, tmp_path, f"sqlite:///{tmp_path}/rs.db")
    cl.mysql_port = free_port()
    try:
        cl.start_rs(mysql_addr=f"127.0.0.1:{cl.mysql_port}")
        a1 = cl.start_agent("z1")
        refused = mariadb(cl, f"ALTER SYSTEM ADD SERVER '{a1}' ZONE 'z1'", *root_cert_flags())
        assert "ERROR 4638 (HY000)" in refused.stderr, refused.stderr  # not bootstrapped yet
        r = mariadb(
            cl, f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{a1}'", *root_cert_flags()
        )
        assert r.returncode == 0, r.stderr
        wait_until(lambda: cl.statuses().get(a1) == "ACTIVE", 20, message="bootstrap server")
        again = mariadb(
            cl, f"ALTER SYSTEM BOOTSTRAP REGION 'r1' ZONE 'z1' SERVER '{a1}'", *root_cert_flags()
        )
        assert again.returncode == 1 and "ERROR " in again.stderr, again.stderr
        assert cl.statuses() == {a1: "ACTIVE"}
    finally:
        errors = procs.stop_all()
        assert not errors, errors


# --------------------------------------------------------------------------- Connector/J

JAVA = """
import java.sql.*;
public class Q {
  public static void main(String[] a) throws Exception {
    Connection c;
    try { c = DriverManager.getConnection(a[0]); }
    catch (SQLException e) {
      System.out.println("CONNECT_ERR " + e.getErrorCode() + " " + e.getSQLState());
      System.exit(2); return;
    }
    try (c; Statement s = c.createStatement()) {
      for (int i = 1; i < a.length; i++) {
        try {
          if (s.execute(a[i])) {
            ResultSet r = s.getResultSet();
            while (r.next()) System.out.println("ROW " + r.getString(1));
          } else System.out.println("OK " + s.getUpdateCount());
        } catch (SQLException e) { System.out.println("ERR " + e.getErrorCode() + " " + e.getSQLState()); }
      }
    }
  }
}
"""


def test_mariadb_connector_j(c: MyCluster, tmp_path: Path) -> None:
    if not JAR.exists() or shutil.which("javac") is None:
        pytest.fail(
            "needs javac and libmariadb-java (apt-get install -y libmariadb-java)", pytrace=False
        )
    (tmp_path / "Q.java").write_text(JAVA)
    subprocess.run(
        ["javac", "-d", str(tmp_path), str(tmp_path / "Q.java")], check=True, timeout=120
    )
    url = (
        f"jdbc:mariadb://127.0.0.1:{c.mysql_port}/oceanbase?user={OPS}&password={OPS_PW}"
        f"&useSsl=true&serverSslCert={ca()}"
    )
    r = subprocess.run(
        [
            "java",
            "-cp",
            f"{JAR}:{tmp_path}",
            "Q",
            url,
            "SELECT 1",
            # The program prints each row's first column; SHOW PARAMETERS' first is the zone.
            "SELECT NAME FROM GV$OB_PARAMETERS WHERE NAME = 'lease_time' LIMIT 1",
            "ALTER SYSTEM DELETE SERVER '127.0.0.9:1'",
            JOIN,
            GROUP_BY,
            "SHOW TABLES LIKE '__all_serv%'",
            "DESC __all_zone",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "ROW 1" in lines and "ROW lease_time" in lines, r.stdout
    assert "ERR 4630 HY000" in lines, r.stdout
    by_zone, joined = expected_reads(c)
    rows = [ln[4:] for ln in lines if ln.startswith("ROW ")]
    i = rows.index("lease_time") + 1
    assert rows[i : i + 1 + len(by_zone)] == [str(joined), *(z for z, _ in by_zone)], r.stdout
    assert "__all_server" in rows and rows[-6:] == [  # DESC __all_zone: the Field column
        "zone",
        "name",
        "value",
        "info",
        "gmt_create",
        "gmt_modified",
    ], r.stdout
    plain = subprocess.run(
        [
            "java",
            "-cp",
            f"{JAR}:{tmp_path}",
            "Q",
            f"jdbc:mariadb://127.0.0.1:{c.mysql_port}/oceanbase?user={OPS}&password={OPS_PW}",
            "SELECT 1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 2, plain.stderr[-2000:]
    assert plain.stdout.split()[:2] == ["CONNECT_ERR", "3159"], plain.stdout
