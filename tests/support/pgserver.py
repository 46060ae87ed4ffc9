"""A throw-away PostgreSQL server for the test session.

``PgServer`` runs ``initdb`` into a fresh temporary directory and starts ``postgres`` on a free
loopback port with durability switched off (the data is disposable, so fsync and friends
only cost time). PostgreSQL refuses to run as root; when the tests run as root, every server
command goes through ``runuser -u postgres``. Every wait is bounded: ``pg_ctl`` gets ``-t`` and
each subprocess call a timeout of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.ports import free_port
from tests.support.timescale import scaled

HOST = "127.0.0.1"
SUPERUSER = "postgres"
# pg_ctl's own -t, and the outer limit on each subprocess call (a bit more than -t so that
# pg_ctl reports its own, more readable, timeout first); both scaled by the run's wait
# factor (tests/support/timescale.py).
PG_CTL_TIMEOUT_S = 60
SUBPROCESS_TIMEOUT_S = PG_CTL_TIMEOUT_S + 30


def _pg_ctl_t() -> str:
    """pg_ctl's ``-t`` for this run."""
    return str(round(scaled(PG_CTL_TIMEOUT_S)))


# Tries with a fresh port when the one picked was taken between probing and binding.
START_ATTEMPTS = 3


class PgNotAvailable(RuntimeError):
    """The PostgreSQL server binaries (or the ``postgres`` user needed as root) are missing."""


class PgServerError(RuntimeError):
    """A PostgreSQL server command failed; the message carries its output and the log tail."""


def find_pg_bindir() -> Path:
    """Directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    ``initdb`` on PATH wins (resolved through symlinks, because Debian links only some of the
    binaries into /usr/local/bin or /usr/bin); otherwise the newest
    ``/usr/lib/postgresql/<major>/bin``. Raises :class:`PgNotAvailable` with install advice.
    """
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: _major_of(Path(p).parent.name),
        reverse=True,
    )
    candidates.extend(Path(p) for p in debian)
    for bindir in candidates:
        if all(os.access(bindir / exe, os.X_OK) for exe in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise PgNotAvailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or in "
        "/usr/lib/postgresql/*/bin. Run `make setup` (as root it installs Debian's "
        "`postgresql` package) or install PostgreSQL 15 yourself. Set OB_TEST_SKIP_PG=1 to "
        "skip the PostgreSQL half of the suite in a quick local run."
    )


def _wait_dead(pid: int, timeout_s: float = 10.0) -> None:
    """Wait (bounded) until ``pid`` is gone or a zombie."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)
    raise PgServerError(f"process {pid} still alive {timeout_s}s after SIGKILL")


def _major_of(name: str) -> int:
    try:
        return int(name)
    except ValueError:
        return -1


class PgServer:
    """A private PostgreSQL cluster in a temporary directory, listening on 127.0.0.1 only
    (or on the one address of the host it is given).

    ``PgServer()`` initialises and starts it; :meth:`stop` shuts it down and deletes the
    directory (idempotent, so it is safe to call from both a fixture's ``finally`` and
    ``atexit``, which it registers itself). :meth:`restart` keeps the data directory and the port, for fault tests.
    """

    def __init__(
        self,
        *,
        bindir: Path | None = None,
        max_connections: int = 200,
        settings: dict[str, str] | None = None,
        standby_of: PgServer | None = None,
        host: str = HOST,
        wrap: Sequence[str] = (),
        allow: str | None = None,
    ) -> None:
        """``max_connections``: PostgreSQL's limit (a small one for the connection-exhaustion
        test, tests/integration/test_db_faults.py). ``settings``: server settings (``-c``)
        over the defaults of this fixture (e.g. ``synchronous_commit``). ``standby_of``: make
        this server a streaming standby of that running one (``pg_basebackup -R`` instead of
        ``initdb``; the HA recipe, tests/support/pg_ha.py). ``host``: the address it listens
        on and is reached at (a host of tests/support/hosts.py: its own network namespace);
        ``wrap``: the command prefix every server command runs under (that host's ``ip netns
        exec``, so the postmaster it forks lives there); ``allow``: a network (CIDR) whose
        clients ``pg_hba.conf`` trusts besides loopback."""
        self.host = host
        self.wrap = list(wrap)
        self.allow = allow
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self.bindir = bindir or find_pg_bindir()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres and shutil.which("runuser") is None:
            raise PgNotAvailable("running as root needs `runuser` to start PostgreSQL as postgres")
        self._pw: pwd.struct_passwd | None = None
        if self._as_postgres:
            try:
                self._pw = pwd.getpwnam(SUPERUSER)
            except KeyError:
                raise PgNotAvailable(
                    "running as root, but there is no `postgres` user to run PostgreSQL as "
                    "(Debian's postgresql package creates it)"
                ) from None
        self.base_dir = Path(tempfile.mkdtemp(prefix="obrs-pg-", dir=self._temp_parent()))
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "postgres.log"
        self.port = 0
        self._running = False
        self._removed = False
        # Whatever happens to the code that owns this server (a crashed script, a fixture
        # whose teardown never ran), the interpreter's exit stops it and removes the files.
        atexit.register(self.stop)
        try:
            if self._pw is not None:
                os.chown(self.base_dir, self._pw.pw_uid, self._pw.pw_gid)
            if standby_of is None:
                self._initdb()
            else:
                self._basebackup(standby_of)
            self._start_on_free_port()
        except BaseException:
            self.stop()
            raise

    # -- public API ----------------------------------------------------------------------

    def url(self, dbname: str) -> str:
        """SQLAlchemy URL of database ``dbname`` on this server (psycopg 3 driver)."""
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{dbname}"

    def connect(self, dbname: str = "postgres") -> psycopg.Connection:
        """A plain autocommit psycopg connection (for administration and assertions)."""
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=SUPERUSER,
            dbname=dbname,
            autocommit=True,
            connect_timeout=10,
        )

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE name`` (must not exist yet)."""
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop_database(self, name: str) -> None:
        """Drop ``name`` if it exists, disconnecting whoever is still connected to it."""
        with self.connect() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    @property
    def running(self) -> bool:
        """Whether this object started the server and has not stopped it since."""
        return self._running

    def restart(self) -> None:
        """Stop the server (fast shutdown) and start it again on the same data and port."""
        self._pg_stop()
        self._pg_start()

    def outage(self) -> None:
        """Stop the server but keep its data directory and port: a database outage, ended
        by :meth:`recover`."""
        self._pg_stop()

    def recover(self) -> None:
        """Start the server again after :meth:`outage`, on the same data and port."""
        self._pg_start()

    def kill9(self) -> None:
        """SIGKILL the postmaster and every process it started, at once (a crash); the data
        directory and port stay, :meth:`recover` starts it again (crash recovery)."""
        from tests.support.pg_ha import children_of

        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError) as e:
            raise PgServerError(f"no postmaster to kill: {e}") from e
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGSTOP)
        for child in children_of(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        # The dead postmaster may stay a zombie (its parent, pg_ctl, is gone and the
        # container's init may not reap): PostgreSQL would take its pid file for a live
        # server and refuse to start again. It is dead, so the file goes.
        _wait_dead(pid)
        for left in (
            self.data_dir / "postmaster.pid",
            self.base_dir / f".s.PGSQL.{self.port}.lock",
            self.base_dir / f".s.PGSQL.{self.port}",
        ):
            with contextlib.suppress(FileNotFoundError):
                left.unlink()
        self._running = False

    def promote(self) -> None:
        """``pg_ctl promote -w`` (a standby becomes a primary on the next timeline)."""
        self._run(["pg_ctl", "-D", str(self.data_dir), "-w", "-t", _pg_ctl_t(), "promote"])

    def stop(self) -> None:
        """Shut the server down and delete its directory. Safe to call more than once."""
        try:
            self._pg_stop()
        finally:
            if not self._removed:
                shutil.rmtree(self.base_dir, ignore_errors=True)
                self._removed = True

    def log_tail(self, max_chars: int = 4000) -> str:
        """The end of the server log (for error messages)."""
        try:
            return self.log_file.read_text(errors="replace")[-max_chars:]
        except OSError:
            return ""

    # -- internals -----------------------------------------------------------------------

    @staticmethod
    def _temp_parent() -> str:
        # As root the directory is chowned to postgres, but postgres must also be able to
        # traverse its parent: a TMPDIR like /root/tmp would not do, /tmp always does.
        parent = tempfile.gettempdir()
        if os.geteuid() == 0 and not os.stat(parent).st_mode & 0o001:
            parent = "/tmp"
        return parent

    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", SUPERUSER, "--", *cmd]
        cmd = [*self.wrap, *cmd]
        env = dict(os.environ)
        # Messages in English whatever the host's locale, and no stray PG* variables
        # (PGPORT, PGDATA...) from the developer's shell steering the commands.
        env = {k: v for k, v in env.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        try:
            proc = subprocess.run(
                cmd,
                # cwd must be readable by postgres (initdb and pg_ctl complain about /root).
                cwd=self.base_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=scaled(SUBPROCESS_TIMEOUT_S),
            )
        except subprocess.TimeoutExpired as e:
            raise PgServerError(
                f"{' '.join(cmd)} did not finish within {scaled(SUBPROCESS_TIMEOUT_S):.0f}s\n"
                f"--- postgres log ---\n{self.log_tail()}"
            ) from e
        if check and proc.returncode != 0:
            raise PgServerError(
                f"{' '.join(cmd)} exited with {proc.returncode}\n"
                f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}\n"
                f"--- postgres log ---\n{self.log_tail()}"
            )
        return proc

    def _initdb(self) -> None:
        # --locale=C: the host's LANG may name a locale that is not installed, which makes
        # initdb fail; C with UTF8 encoding always exists and sorts deterministically.
        self._run(
            [
                "initdb",
                "-D",
                str(self.data_dir),
                "-A",
                "trust",
                "-U",
                SUPERUSER,
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        if self.allow is not None:
            # initdb's pg_hba.conf trusts loopback only; a server on a host of its own is
            # reached from the hosts of its network.
            with (self.data_dir / "pg_hba.conf").open("a") as f:
                f.write(f"host all all {self.allow} trust\n")

    def _basebackup(self, primary: PgServer) -> None:
        # -R writes primary_conninfo and standby.signal; the standby names itself with the
        # port-independent application_name "standby" (synchronous_standby_names may list it).
        self._run(
            [
                "pg_basebackup",
                "-D",
                str(self.data_dir),
                "-h",
                primary.host,
                "-p",
                str(primary.port),
                "-U",
                SUPERUSER,
                "-R",
                "-X",
                "stream",
                "--no-sync",
                "-d",
                f"host={primary.host} port={primary.port} user={SUPERUSER} application_name=standby",
            ]
        )

    def _start_on_free_port(self) -> None:
        last: PgServerError | None = None
        for _ in range(START_ATTEMPTS):
            self.port = free_port()
            try:
                self._pg_start()
                return
            except PgServerError as e:
                # Another process may have grabbed the port after free_port() released it;
                # only that case is worth another try.
                last = e
                if "could not bind" not in self.log_tail() and "in use" not in str(e):
                    raise
        assert last is not None
        raise last

    def _pg_start(self) -> None:
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.base_dir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": str(self.max_connections),
            **self.settings,
        }
        options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        self._running = True  # from here on a stop attempt is worthwhile even if start fails
        self._run(
            [
                "pg_ctl",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                _pg_ctl_t(),
                "-o",
                options,
                "start",
            ]
        )

    def _pg_stop(self) -> None:
        if not self._running:
            return
        if not (self.data_dir / "postmaster.pid").exists():
            self._running = False
            return
        stop = ["pg_ctl", "-D", str(self.data_dir), "-w", "-t", _pg_ctl_t(), "stop"]
        try:
            self._run([*stop, "-m", "fast"])
        except PgServerError:
            # A fast shutdown that hangs (e.g. a stuck backend) must not leave a server
            # behind: an immediate shutdown does not wait for anybody.
            with contextlib.suppress(PgServerError):
                self._run([*stop, "-m", "immediate"])
            if (self.data_dir / "postmaster.pid").exists():
                self._kill_postmaster()
                raise
        self._running = False

    def _kill_postmaster(self) -> None:
        # Last resort before the directory goes away: backends notice their postmaster's
        # death and exit on their own.
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        self._running = False
