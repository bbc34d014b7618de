"""A throwaway PostgreSQL server for tests and benchmarks.

The PostgreSQL store has to be exercised against a real server: behaviour under
concurrent transactions, advisory locks and a database that disappears mid-run
cannot be faked convincingly.  Depending on a shared, pre-configured server makes
runs order-dependent and hard to reproduce, so each :class:`TemporaryCluster`
owns a private data directory and port and is thrown away afterwards.

Only the standard library is used so that importing this module never pulls a
database driver into code that does not already depend on one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from types import TracebackType

from plait.testing.pg_wire import WireError, WireSession, probe

__all__ = ["TemporaryCluster", "find_pg_bin"]

_SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
_STOP_MODES = ("smart", "fast", "immediate")
# Used only when running as root and no ``postgres`` account exists.
_FALLBACK_SERVER_USER = "plait-pg"
_HOST = "127.0.0.1"


def find_pg_bin() -> Path | None:
    """Locate a directory that holds ``initdb``, ``pg_ctl`` and ``postgres`` together.

    PATH wins so that a developer can point tests at a different build simply by
    putting it first.  Symlinks are resolved because distributions often expose
    only some of the tools on PATH (Debian links ``psql`` to a wrapper), and the
    server tools must all come from one installation.  The highest version under
    ``/usr/lib/postgresql`` is the fallback because Debian-style packages install
    there without touching PATH.
    """
    found = shutil.which("initdb")
    if found is not None:
        initdb = Path(found)
        for candidate in (initdb.resolve().parent, initdb.parent):
            if _has_server_binaries(candidate):
                return candidate

    root = Path("/usr/lib/postgresql")
    try:
        versions = [p for p in root.iterdir() if _has_server_binaries(p / "bin")]
    except OSError:
        return None
    if not versions:
        return None
    return max(versions, key=_version_key) / "bin"


def _has_server_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in _SERVER_BINARIES)


def _version_key(path: Path) -> tuple[int, ...]:
    # Numeric so that 10 sorts after 9; non-numeric names sort first.
    return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (-1,)


class TemporaryCluster:
    """A throwaway PostgreSQL server started from the installed binaries on a free port.

    PostgreSQL refuses to run as root, so when the tests run as root (as in most
    containers) the server runs as the ``postgres`` account, or as a system
    account created for the purpose, and every server command goes through
    ``runuser``.  Clients connect over TCP on 127.0.0.1 with trust
    authentication, so no passwords are involved.

    Every started cluster is remembered until :meth:`cleanup`, and an ``atexit``
    hook cleans up whatever is left, so a test run that forgets (or crashes
    before) cleanup does not leave servers behind.
    """

    #: Superuser created by initdb; also the user in :attr:`dsn`.
    superuser = "postgres"
    #: Seconds to wait for the server to accept connections.
    start_timeout = 60.0
    #: Seconds a graceful stop may take before it is escalated.
    stop_timeout = 30.0

    def __init__(
        self, *, fsync: bool = False, base_dir: str | None = None, port: int | None = None
    ) -> None:
        """Prepare a cluster without touching the filesystem.

        ``fsync`` defaults to off because tests care about behaviour, not
        durability, and it makes them several times faster; benchmarks should
        pass ``fsync=True`` so that commit latency is realistic.  ``base_dir``
        is where the temporary directory is created (the system default when
        None).  ``port`` pins the TCP port; by default a free one is chosen.
        """
        self._fsync = fsync
        self._base_dir = base_dir
        self._fixed_port = port
        self._port: int | None = port
        self._dir: Path | None = None
        self._initialized = False
        self._running = False
        self._started_once = False
        self._bin: Path | None = None
        self._account: pwd.struct_passwd | None = None
        #: the kept session ``create_database`` speaks through (opened on first use)
        self._admin: WireSession | None = None

    # -- public API ----------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """Connection string for the default ``postgres`` database."""
        return self._dsn_for("postgres")

    @property
    def port(self) -> int:
        """TCP port on 127.0.0.1; fixed for the cluster's lifetime once started."""
        if self._port is None:
            raise RuntimeError("the cluster has no port yet; call start() first")
        return self._port

    @property
    def directory(self) -> Path:
        """Temporary directory holding the data directory, log and unix socket."""
        if self._dir is None:
            raise RuntimeError("the cluster has no directory yet; call start() first")
        return self._dir

    @property
    def data_dir(self) -> Path:
        """The PostgreSQL data directory (``PGDATA``)."""
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        """Server log, kept so that failures can be diagnosed after the fact."""
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        """Whether the server is up; false after a stop or if it died on its own."""
        return self._running and self._server_pid() is not None

    def start(self) -> None:
        """Initialise the cluster on first use, start the server and wait until it is usable.

        Calling it on a running cluster is a no-op.  On failure the server is
        guaranteed not to be running and a RuntimeError carrying the tail of
        the server log is raised; the directory stays until :meth:`cleanup` so
        it can be inspected.
        """
        if self.running:
            return
        _register(self)
        try:
            self._prepare()
            # An automatically chosen port can be taken by another process
            # between choosing and binding it; pick again rather than fail, but
            # only before anyone has seen the DSN.
            attempts = 3 if self._fixed_port is None and not self._started_once else 1
            for attempt in range(attempts):
                try:
                    self._start_server()
                    self._started_once = True
                    return
                except _PortInUseError:
                    if attempt == attempts - 1:
                        raise
                    self._port = _free_port()
        except BaseException:
            self._kill_server()
            raise

    def stop(self, mode: str = "fast") -> None:
        """Stop the server, keeping the data directory so it can be started again.

        ``mode`` is a pg_ctl shutdown mode: ``smart`` waits for clients to
        disconnect, ``fast`` disconnects them, ``immediate`` aborts like a crash.
        A stop that does not finish within :attr:`stop_timeout` is escalated to
        ``immediate`` and then to SIGKILL, so after this call the server is
        never running.
        """
        if mode not in _STOP_MODES:
            raise ValueError(f"mode must be one of {_STOP_MODES}, not {mode!r}")
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._dir is None or not self._initialized:
            self._running = False
            return
        try:
            if self._server_pid() is not None:
                self._pg_ctl_stop(mode)
                if mode != "immediate" and self._server_pid() is not None:
                    self._pg_ctl_stop("immediate")
        finally:
            self._kill_server()
            self._running = False

    def restart(self) -> None:
        """Stop and start again on the same port and data directory.

        Open connections are dropped, which is how tests simulate a database
        that goes away and comes back; data that was committed survives.
        """
        self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop the server if needed and delete everything the cluster created.

        Safe to call any number of times, after a failed start, or on a cluster
        that was never started.
        """
        try:
            with contextlib.suppress(Exception):
                self.stop()
        finally:
            self._kill_server()
            self._running = False
            directory, self._dir = self._dir, None
            self._initialized = False
            self._started_once = False
            if self._fixed_port is None:
                self._port = None
            try:
                if directory is not None:
                    _remove_tree(directory)
            finally:
                _unregister(self)

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create a new database and return a DSN for it: empty, or a copy of the
        database ``template`` (which no session may be using).

        Giving each test its own database keeps tests independent without the
        cost of a cluster per test; a template migrated once spares each test its
        migrations.  Fails if the database already exists.
        """
        if not self._running:
            raise RuntimeError("the cluster is not running; call start() first")
        statement = f"CREATE DATABASE {_identifier(name)}"
        if template is not None:
            statement += f" TEMPLATE {_identifier(template)}"
        self._administer(statement, f"could not create database {name!r}")
        return self._dsn_for(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, ending the sessions still on it: a test run that keeps every
        database it made fills gigabytes and spends minutes deleting them at the end."""
        if not self._running:
            raise RuntimeError("the cluster is not running; call start() first")
        statement = f"DROP DATABASE IF EXISTS {_identifier(name)} WITH (FORCE)"
        self._administer(statement, f"could not drop database {name!r}")

    def _administer(self, statement: str, failure: str) -> None:
        if self._admin is None:
            self._admin = WireSession(_HOST, self.port, self.superuser, "postgres")
        try:
            self._admin.execute(statement, timeout=self.start_timeout)
        except (WireError, OSError) as exc:
            raise RuntimeError(f"{failure}: {exc}") from None

    def __enter__(self) -> TemporaryCluster:
        try:
            self.start()
        except BaseException:
            # __exit__ is not called when __enter__ raises.
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<TemporaryCluster {state} port={self._port} dir={self._dir}>"

    # -- setup ---------------------------------------------------------------------

    def _prepare(self) -> None:
        if self._bin is None:
            self._bin = find_pg_bin()
            if self._bin is None:
                raise RuntimeError(
                    "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found "
                    "on PATH or under /usr/lib/postgresql/*/bin"
                )
        if os.geteuid() == 0 and self._account is None:
            self._account = _server_account()
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="plait-pg-", dir=self._base_dir)).resolve()
            (self._dir / "run").mkdir()
            if self._account is not None:
                for path in (self._dir, self._dir / "run"):
                    os.chown(path, self._account.pw_uid, self._account.pw_gid)
                self._check_server_can_use_directory()
        if self._port is None:
            self._port = _free_port()
        if not self._initialized:
            self._initdb()

    def _check_server_can_use_directory(self) -> None:
        # mkdtemp's own mode is fine once chowned, but every ancestor must be
        # searchable by the server account too, which a base_dir under /root
        # is not.  Asking the account itself also honours groups and ACLs.
        assert self._dir is not None and self._account is not None
        result = self._run(["test", "-w", str(self._dir), "-a", "-x", str(self._dir)], timeout=30)
        if result.returncode != 0:
            raise RuntimeError(
                f"the server account {self._account.pw_name!r} cannot write to {self._dir}; "
                "pass a base_dir whose parents it can traverse (for example /tmp)"
            )

    def _initdb(self) -> None:
        args = [
            str(self._tool("initdb")),
            "-D",
            str(self.data_dir),
            "--auth=trust",
            "-U",
            self.superuser,
            "-E",
            "UTF8",
            "--locale=C",
        ]
        if not self._fsync:
            args.append("--no-sync")
        result = self._run(args, timeout=300)
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()
            raise RuntimeError(f"initdb failed (exit {result.returncode}):\n{output}")
        # Settings live in a file of their own, rewritten before every start, so
        # that the generated postgresql.conf stays untouched apart from the include.
        with (self.data_dir / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\ninclude 'plait.conf'\n")
        self._initialized = True

    def _write_settings(self) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": _quote_setting(str(self.directory / "run")),
            "fsync": "on" if self._fsync else "off",
            "max_connections": "200",
            "shared_buffers": "128MB",
        }
        path = self.data_dir / "plait.conf"
        path.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()), encoding="utf-8")
        if self._account is not None:
            os.chown(path, self._account.pw_uid, self._account.pw_gid)

    # -- running the server --------------------------------------------------------

    def _start_server(self) -> None:
        self._write_settings()
        deadline = time.monotonic() + self.start_timeout
        try:
            log_offset = self.log_path.stat().st_size
        except OSError:
            log_offset = 0
        # pg_ctl -w notices a postmaster that dies during startup straight away,
        # which a connection poll alone could only detect by timing out.
        result = self._run(
            [
                str(self._tool("pg_ctl")),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                str(max(1, int(self.start_timeout))),
                "-s",
            ],
            timeout=self.start_timeout + 30,
        )
        if result.returncode != 0:
            self._kill_server()
            log = self._log_tail()
            message = (
                f"PostgreSQL failed to start on port {self._port} "
                f"(pg_ctl exit {result.returncode}): {(result.stderr or result.stdout).strip()}\n"
                f"--- end of {self.log_path} ---\n{log}"
            )
            # Only this attempt's output counts; the log is appended to across starts.
            if "could not bind" in self._log_since(log_offset):
                raise _PortInUseError(message)
            raise RuntimeError(message)
        self._wait_until_ready(deadline)
        self._running = True

    def _wait_until_ready(self, deadline: float) -> None:
        # "Accepting TCP connections" is not enough: during recovery the server
        # accepts and then refuses the session, so complete a startup handshake.
        delay = 0.005
        while True:
            reason = probe(_HOST, self.port, self.superuser, "postgres") or ""
            if not reason:
                return
            if self._server_pid() is None:
                reason = f"the server exited ({reason})"
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)
        self._kill_server()
        raise RuntimeError(
            f"PostgreSQL on port {self._port} did not become ready: {reason}\n"
            f"--- end of {self.log_path} ---\n{self._log_tail()}"
        )

    def _pg_ctl_stop(self, mode: str) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._run(
                [
                    str(self._tool("pg_ctl")),
                    "stop",
                    "-D",
                    str(self.data_dir),
                    "-m",
                    mode,
                    "-w",
                    "-t",
                    str(max(1, int(self.stop_timeout))),
                    "-s",
                ],
                timeout=self.stop_timeout + 30,
            )

    def _server_pid(self) -> int | None:
        """PID of a live postmaster for this data directory, if any.

        postmaster.pid survives a SIGKILL and PIDs are reused, so the process
        must be alive and actually be a postgres process to count.
        """
        if self._dir is None:
            return None
        try:
            first_line = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first_line.strip())
        except (OSError, ValueError):
            return None
        if pid <= 0:
            return None
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            # PermissionError: owned by someone we may not signal, so not ours.
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            if Path("/proc/self").exists():
                return None  # exited between the two checks
            return pid  # no procfs: trust the signal check
        except OSError:
            return pid
        # pg_ctl starts the postmaster with -D <data dir>, which identifies it.
        if os.fsencode(str(self.data_dir)) not in cmdline:
            return None
        return pid

    def _kill_server(self) -> None:
        """Last resort: make sure no server (or backend) is left running."""
        pid = self._server_pid()
        if pid is None:
            return
        # Backends would exit on their own once the postmaster is gone, but each
        # runs in its own session, so they are found by parent PID and killed too
        # rather than left to linger with the data directory open.
        for victim in (pid, *_child_pids(pid)):
            with contextlib.suppress(OSError):
                os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        delay = 0.005
        while self._server_pid() == pid and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    # -- helpers -------------------------------------------------------------------

    def _dsn_for(self, database: str) -> str:
        user = urllib.parse.quote(self.superuser, safe="")
        db = urllib.parse.quote(database, safe="")
        return f"postgresql://{user}@{_HOST}:{self.port}/{db}"

    def _tool(self, name: str) -> Path:
        assert self._bin is not None
        path = self._bin / name
        if os.access(path, os.X_OK):
            return path
        found = shutil.which(name)
        if found is None:
            raise RuntimeError(f"{name} was found neither in {self._bin} nor on PATH")
        return Path(found)

    def _run(self, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL tool, as the server account when we are root."""
        if self._account is not None:
            if shutil.which("runuser") is not None:
                args = ["runuser", "-u", self._account.pw_name, "--", *args]
            else:
                args = [
                    "setpriv",
                    f"--reuid={self._account.pw_uid}",
                    f"--regid={self._account.pw_gid}",
                    "--init-groups",
                    "--",
                    *args,
                ]
        return subprocess.run(
            args,
            cwd=self._dir,  # the server account may not be able to enter our cwd
            env=_tool_environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except (OSError, RuntimeError):
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:]) or "(server log is empty)"


class _PortInUseError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _child_pids(parent: int) -> list[int]:
    children: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            # The command name is parenthesised and may contain spaces.
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 1 and fields[1] == str(parent):
                children.append(int(entry.name))
    return children


def _quote_setting(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _tool_environment() -> dict[str, str]:
    # PG* variables from the caller's shell (PGDATA, PGHOST, PGPORT, ...) would
    # silently redirect the tools to another server; the C locale keeps
    # messages in English so the log can be matched reliably.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _server_account() -> pwd.struct_passwd:
    """The unprivileged account the server runs as when we are root."""
    for name in ("postgres", _FALLBACK_SERVER_USER):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    result = subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--user-group",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            _FALLBACK_SERVER_USER,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        # A concurrent test process may have created it first; that is fine.
        return pwd.getpwnam(_FALLBACK_SERVER_USER)
    except KeyError:
        raise RuntimeError(
            "PostgreSQL cannot run as root and no 'postgres' account exists; creating "
            f"{_FALLBACK_SERVER_USER!r} failed: {result.stderr.strip()}"
        ) from None


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _remove_tree(path: Path) -> None:
    # A backend that is still exiting can create or delete files while we walk
    # the tree, which makes a single rmtree fail spuriously.
    for _ in range(5):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.05)
    shutil.rmtree(path)


# -- never leave a server behind ---------------------------------------------------

_live: dict[int, TemporaryCluster] = {}
_live_lock = threading.Lock()


def _register(cluster: TemporaryCluster) -> None:
    with _live_lock:
        _live[id(cluster)] = cluster


def _unregister(cluster: TemporaryCluster) -> None:
    with _live_lock:
        _live.pop(id(cluster), None)


@atexit.register
def _cleanup_all() -> None:
    with _live_lock:
        clusters = list(_live.values())
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.cleanup()
