"""A throwaway PostgreSQL cluster for the test run.

`PgServer.start()` runs initdb in a fresh temporary directory and starts a
server that listens only on a unix socket inside that directory (no TCP
port, so parallel runs on one machine never collide). PostgreSQL refuses
to run as root, and CI runs as root while /etc/passwd is 0600: then the
server runs as the unprivileged uid 65534 ("nobody"), with Debian's
nss_wrapper supplying a one-line passwd file so initdb can name its user.

`Unavailable` names the missing binary or library when the machine cannot
run a server; the test fixtures skip on it (and fail on CI, where the
apt step of .ci/run guarantees both).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

UNPRIVILEGED_UID = 65534
USER = "hermes"


class Unavailable(RuntimeError):
    """The machine lacks what a server needs; the message names it."""


def bin_dir() -> Path:
    """The newest installed PostgreSQL server's bin directory (Debian layout
    first, then whatever `initdb` is on PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise Unavailable("the PostgreSQL server binary 'initdb' is not installed "
                          "(Debian: apt-get install postgresql)")
    return Path(initdb).parent


def nss_wrapper() -> str:
    """The path of libnss_wrapper.so (needed only when running as root)."""
    found = glob.glob("/usr/lib/*/libnss_wrapper.so") + glob.glob("/usr/lib/libnss_wrapper.so")
    if not found:
        raise Unavailable("'libnss_wrapper.so' is not installed: as root the server needs it "
                          "(Debian: apt-get install libnss-wrapper)")
    return found[0]


class PgServer:
    """One cluster in its own directory; `url()` names a database on it."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="hpg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.as_root = os.geteuid() == 0
        self.env = dict(os.environ, LC_ALL="C", TZ="UTC")
        if self.as_root:
            self._wrap_identity()

    def _wrap_identity(self) -> None:
        lib = nss_wrapper()
        passwd, group = self.root / "passwd", self.root / "group"
        uid = UNPRIVILEGED_UID
        passwd.write_text(f"{USER}:x:{uid}:{uid}:test server:{self.root}:/bin/false\n")
        group.write_text(f"{USER}:x:{uid}:\n")
        os.chown(self.root, uid, uid)
        self.env.update(LD_PRELOAD=lib, NSS_WRAPPER_PASSWD=str(passwd),
                        NSS_WRAPPER_GROUP=str(group))

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / args[0]), *args[1:]], env=self.env,
                              user=UNPRIVILEGED_UID if self.as_root else None,
                              group=UNPRIVILEGED_UID if self.as_root else None,
                              capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> "PgServer":
        """initdb (once), then start the server and wait until it accepts."""
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8",
                      "--locale=C", "--no-sync", "--no-instructions")
        # fsync off: a test server's data never has to survive the machine.
        options = (f"-k {self.root} -c listen_addresses='' -c fsync=off "
                   "-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB")
        done = self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                         "-l", str(self.log), "-o", options, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start: {done.stderr.strip()}\n"
                               f"{self.log_tail()}")
        return self

    def standby(self) -> "PgServer":
        """A hot standby streaming from this server, in its own directory:
        pg_basebackup (``-R`` writes standby.signal and primary_conninfo, the
        fast checkpoint keeps it to about a second), then started on its own
        socket. `destroy` it like any server."""
        other = PgServer()
        try:
            other._run("pg_basebackup", "-D", str(other.data), "-h", str(self.root), "-U", USER,
                       "-X", "stream", "-R", "-c", "fast", "--no-sync")
            return other.start()
        except BaseException:
            other.destroy()
            raise

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash stop); no error if down."""
        self._run("pg_ctl", "stop", "-w", "-D", str(self.data), "-m", mode, check=False)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@/{dbname}?host={self.root}"

    def destroy(self) -> None:
        """Stop the server and remove its directory."""
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def missing_driver() -> str | None:
    """Why the PostgreSQL driver cannot be used, or None."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as e:
        return f"the 'psycopg' driver is not installed ({e.name}; pip install '.[postgres]')"
    return None


class Databases:
    """Fresh databases on one server: each a copy of a template that already
    holds the schema (CREATE DATABASE ... TEMPLATE with FILE_COPY copies its
    files: ~40 ms, a quarter of the default WAL_LOG strategy's time here)."""

    TEMPLATE = "hermes_template"

    def __init__(self, server: PgServer) -> None:
        import psycopg
        from sessiondb.pg import migrations
        self.server = server
        self.count = 0
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.TEMPLATE}")
        with psycopg.connect(server.url(self.TEMPLATE), autocommit=True) as conn:
            migrations.apply_pending(conn)

    def create(self, *, schema: bool = True) -> str:
        """The URL of a new database (with the schema, or empty)."""
        import psycopg
        self.count += 1
        name = f"t{os.getpid()}_{self.count}"
        template = self.TEMPLATE if schema else "template0"
        with psycopg.connect(self.server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
        return self.server.url(name)

    def drop(self, url: str) -> None:
        import psycopg
        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        with psycopg.connect(self.server.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
