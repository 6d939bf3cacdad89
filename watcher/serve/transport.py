"""Where the daemon listens, and who may talk to it.

* ``ipc://PATH`` (the default): a Unix socket file created 0660 inside a directory created 0750,
  whatever the umask the daemon inherited. Reaching the daemon = being in its group.
* ``tcp://HOST:PORT``: only with CURVE. The daemon's key pair comes from a ZeroMQ certificate file
  (``daemon.curve_secret_key_file``) and clients must present a public key found in
  ``daemon.curve_allowed_keys_dir``. A client without an allowed key never completes the
  handshake: it gets nothing, not even an ERROR. When keys are configured, CURVE is used on
  ``ipc://`` too.
* One daemon per endpoint. libzmq unlinks an existing ipc socket file before binding, so a second
  daemon would silently steal the endpoint from a live one. Before binding, the daemon takes an
  exclusive lock next to the socket (``agents.sock.lock``; the kernel releases it even on kill -9)
  and probes the socket file with a plain connect(): a listener answers → refuse to start; the
  connection is refused → the file is a stale leftover of a dead daemon → unlink it and bind.
  (The kernel accepts a connection into the backlog even while the owner is busy, so the probe
  cannot mistake a loaded daemon for a dead one, as a request/reply probe with a timeout could.)
  A second bind on a ``tcp://`` port fails in the kernel (EADDRINUSE) and is reported as such.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from watcher.observe import logs

log = logs.get("compactd.transport")

SCHEMES: Final = ("ipc", "tcp")
SOCKET_MODE: Final = 0o660
DIR_MODE: Final = 0o750
BIND_UMASK: Final = 0o117  # socket file 0660
SNDHWM: Final = 1000
RCVHWM: Final = 1000


class TransportError(RuntimeError):
    """The endpoint cannot be served; the message says why and what to fix."""


class TransportConfig(Protocol):  # the [daemon] keys read here (watcher.config.settings.DaemonConfig)
    @property
    def max_frame_bytes(self) -> int: ...
    @property
    def curve_secret_key_file(self) -> str: ...
    @property
    def curve_allowed_keys_dir(self) -> str: ...


def scheme(endpoint: str) -> str:
    s, sep, rest = endpoint.partition("://")
    if not sep or s not in SCHEMES or not rest:
        raise TransportError(
            f"unsupported endpoint {endpoint!r}: "
            "use ipc:///path/to/agents.sock or tcp://HOST:PORT (with CURVE)"
        )
    return s


def ipc_path(endpoint: str) -> Path | None:
    return Path(endpoint[len("ipc://") :]) if endpoint.startswith("ipc://") else None


# --- CURVE keys -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerKeys:
    public: bytes  # z85
    secret: bytes  # z85
    allowed_dir: Path


def load_server_keys(secret_file: str, allowed_dir: str) -> ServerKeys:
    """The daemon's CURVE key pair and the directory of allowed client keys; TransportError if unusable."""
    path = Path(secret_file)
    try:
        st = path.stat()
    except OSError as exc:
        raise TransportError(f"daemon.curve_secret_key_file: cannot read {path}: {exc.strerror}") from None
    if st.st_mode & 0o007:
        raise TransportError(
            f"daemon.curve_secret_key_file: {path} is accessible to other users "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it"
        )
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise TransportError(f"daemon.curve_secret_key_file: {path}: {exc}") from None
    if not secret:
        raise TransportError(
            f"daemon.curve_secret_key_file: {path} holds no secret key "
            "(give the .key_secret file that `compactd keygen` writes)"
        )
    adir = Path(allowed_dir)
    if not adir.is_dir():
        raise TransportError(f"daemon.curve_allowed_keys_dir: {adir} is not a directory")
    return ServerKeys(public, secret, adir)


@dataclass
class AllowedKeys:
    """The ZAP credentials provider: client public keys found in a directory (``*.key`` files)."""

    directory: Path
    keys: frozenset[bytes] = frozenset()
    allowed: int = 0
    denied: int = 0

    def reload(self) -> int:
        """Re-read the directory (call after adding or removing a key); returns the number of keys."""
        try:
            found = zmq.auth.load_certificates(self.directory)
        except (OSError, ValueError) as exc:
            log.error("curve_keys_unreadable", directory=str(self.directory), error=str(exc))
            return len(self.keys)  # keep the previous set rather than locking everyone out
        self.keys = frozenset(k for k, ok in found.items() if ok)
        if not self.keys:
            log.warning("curve_no_allowed_keys", directory=str(self.directory))
        return len(self.keys)

    def callback(self, domain: str, key: bytes) -> bool:
        ok = key in self.keys
        if ok:
            self.allowed += 1
        else:
            self.denied += 1
            if self.denied <= 10 or self.denied % 1000 == 0:  # bounded noise from a scanner
                log.warning("curve_client_denied", key=key.decode("ascii", "replace"), denied=self.denied)
        return ok


def write_keypair(directory: Path, name: str) -> tuple[Path, Path]:
    """Create ``NAME.key`` (public) and ``NAME.key_secret`` (0600) in ``directory`` (made 0700)."""
    if not name or "/" in name or name.startswith("."):
        raise TransportError(f"key name must be a plain file name, got {name!r}")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    for p in (public, secret):
        if p.exists():
            raise TransportError(f"{p} already exists; remove it or choose another --name")
    old = os.umask(0o077)
    try:
        pub, sec = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    Path(pub).chmod(0o644)
    Path(sec).chmod(0o600)
    return Path(pub), Path(sec)


# --- preflight --------------------------------------------------------------------------------------


def preflight(endpoint: str, cfg: TransportConfig) -> ServerKeys | None:
    """Check the endpoint and the keys before anything slow happens (the model load)."""
    s = scheme(endpoint)
    secret_file, allowed = cfg.curve_secret_key_file, cfg.curve_allowed_keys_dir
    if s == "tcp" and not (secret_file and allowed):
        raise TransportError(
            f"refusing to listen on {endpoint} without CURVE: tcp:// endpoints require CURVE "
            "authentication and encryption; set daemon.curve_secret_key_file and "
            "daemon.curve_allowed_keys_dir (create keys with `compactd keygen DIR`), "
            "or use an ipc:// socket"
        )
    if bool(secret_file) != bool(allowed):
        raise TransportError(
            "daemon.curve_secret_key_file and daemon.curve_allowed_keys_dir must be set together"
        )
    return load_server_keys(secret_file, allowed) if secret_file else None


# --- one daemon per ipc endpoint -------------------------------------------------------------------


def _make_dir(directory: Path) -> None:
    """Create the socket's directory 0750 (exactly: mkdir's mode is filtered by the umask);
    an existing directory is left as it is (its owner, e.g. systemd's RuntimeDirectory=, decides)."""
    if directory.is_dir():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=DIR_MODE)
        directory.chmod(DIR_MODE)


def _listening(path: Path) -> bool:
    """True if a process accepts connections on the Unix socket at ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(path))
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except TimeoutError:  # the backlog is full: somebody is there
        return True
    except OSError as exc:
        raise TransportError(f"cannot probe the existing socket {path}: {exc.strerror or exc}") from None
    finally:
        probe.close()


def _lock(path: Path) -> int:
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise TransportError(f"cannot create the lock file {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise TransportError(
                f"another compactd (pid {holder}) is already serving ipc://{path}; "
                "stop it first or choose another --socket"
            ) from None
        raise TransportError(f"cannot lock {lock_path}: {exc.strerror}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def claim_ipc(path: Path) -> int:
    """Make ``path`` ours to bind: directory, lock, then a live listener refuses and a stale file goes.
    Returns the lock's file descriptor (keep it open while serving)."""
    _make_dir(path.parent)
    fd = _lock(path)
    try:
        try:
            st = path.lstat()
        except FileNotFoundError:
            return fd
        if not stat.S_ISSOCK(st.st_mode):
            raise TransportError(f"{path} exists and is not a socket; remove it or choose another --socket")
        if _listening(path):
            raise TransportError(
                f"ipc://{path} is already served by a live process (not holding compactd's lock); "
                "stop it first or choose another --socket"
            )
        path.unlink()
        log.info("stale_socket_removed", path=str(path))
        return fd
    except BaseException:
        os.close(fd)
        raise


# --- the listening socket ---------------------------------------------------------------------------


@dataclass
class Listener:
    """The daemon's ROUTER socket with what it needs: the lock, the ZAP authenticator."""

    endpoint: str
    sock: zmq.asyncio.Socket
    lock_fd: int | None = None
    auth: AsyncioAuthenticator | None = None
    allowed: AllowedKeys | None = None

    def reload_keys(self) -> int | None:
        """Re-read the allowed client keys (on SIGHUP); None when CURVE is not in use."""
        return self.allowed.reload() if self.allowed is not None else None

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket; what it still has queued is sent for at most ``linger_ms`` (the
        context's term waits for it), then dropped."""
        self.sock.close(linger_ms)
        if self.auth is not None:
            self.auth.stop()
            self.auth = None
        path = ipc_path(self.endpoint)
        if path is not None and self.lock_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # still ours: nobody else could bind it while we hold the lock
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def listen(ctx: zmq.asyncio.Context, endpoint: str, cfg: TransportConfig) -> Listener:
    """Bind the daemon's ROUTER socket on ``endpoint``; TransportError says why it cannot."""
    keys = preflight(endpoint, cfg)
    path = ipc_path(endpoint)
    lock_fd = claim_ipc(path) if path is not None else None
    sock = ctx.socket(zmq.ROUTER)
    listener = Listener(endpoint, sock, lock_fd)
    try:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, cfg.max_frame_bytes + 1024)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            listener.allowed = AllowedKeys(keys.allowed_dir)
            n = listener.allowed.reload()
            listener.auth = AsyncioAuthenticator(ctx)
            listener.auth.start()
            listener.auth.configure_curve_callback("*", credentials_provider=listener.allowed)
            sock.curve_secretkey = keys.secret
            sock.curve_publickey = keys.public
            sock.curve_server = True
            log.info("curve_enabled", allowed_keys=n, directory=str(keys.allowed_dir))
        old_umask = os.umask(BIND_UMASK)
        try:
            sock.bind(endpoint)
        finally:
            os.umask(old_umask)
        if path is not None:
            path.chmod(SOCKET_MODE)  # exact, whatever libzmq did
    except zmq.ZMQError as exc:
        _abandon(listener, path)
        hint = " (another process is listening there)" if exc.errno == errno.EADDRINUSE else ""
        raise TransportError(f"cannot bind {endpoint}: {exc}{hint}") from None
    except BaseException:
        _abandon(listener, path)
        raise
    return listener


def _abandon(listener: Listener, path: Path | None) -> None:
    """Undo a failed listen() without touching a socket file we did not bind."""
    listener.sock.close(0)
    if listener.auth is not None:
        listener.auth.stop()
    if listener.lock_fd is not None:
        os.close(listener.lock_fd)
        listener.lock_fd = None
