"""The sd_notify(3) protocol, spoken directly (no libsystemd, no third-party package).

systemd passes the address of its notification socket in ``$NOTIFY_SOCKET``: an absolute
path, or ``@name`` for a socket in the abstract namespace. A notification is one
``AF_UNIX``/``SOCK_DGRAM`` datagram of newline-separated ``KEY=value`` assignments; the
kernel attaches our credentials, which is how systemd knows the sender (``NotifyAccess=``).

Outside systemd (no ``$NOTIFY_SOCKET``) every call is a cheap no-op, so the daemon calls
the notifier unconditionally. Nothing here raises on a send failure: a service manager that
cannot be told something is not a reason to crash the service.

The watchdog: with ``WatchdogSec=`` systemd sets ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``)
and restarts the service when no ``WATCHDOG=1`` arrives within that period.
:func:`watchdog_loop` pings from the asyncio event loop, so a hung loop stops the pings.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import socket
import threading
import time

__all__ = ["Notifier", "watchdog_interval", "watchdog_loop"]

# systemd reads a notification into a buffer of this size (NOTIFY_BUFFER_MAX = PIPE_BUF) and
# drops a longer one; refuse to send such a datagram rather than have it vanish.
MAX_DATAGRAM = 4096
# STATUS= is free text for `systemctl status`; keep it well inside one datagram.
MAX_STATUS = 1024
# How long a send may block when systemd's receive queue is full (it almost never is).
SEND_TIMEOUT_S = 1.0

_KEY = re.compile(r"[A-Z][A-Z0-9_]*\Z")


def _sockaddr(address: str) -> str | None:
    """The address to pass to sendto(), or None if sd_notify(3) would not accept it."""
    if address.startswith("/"):
        return address
    if address.startswith("@") and len(address) > 1:
        return "\0" + address[1:]  # abstract namespace
    # Relative paths and other schemes (e.g. "vsock:" on newer systemd) are not supported.
    return None


def _value(value: str | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    # A newline would start another assignment: fold it (and other line breaks) into spaces.
    return " ".join(str(value).splitlines())


def _uint(text: str | None) -> int | None:
    """A plain unsigned decimal ("123"), as systemd writes them; anything else is None."""
    if text is None or not (text.isascii() and text.isdecimal()):
        return None
    return int(text)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_STATUS else text[: MAX_STATUS - 1] + "…"


class Notifier:
    """Sends sd_notify messages to the service manager; a no-op when there is none.

    Thread-safe: the socket is created on first use and shared under a lock.
    """

    def __init__(self, address: str | None) -> None:
        self.address = address or ""  # as given in $NOTIFY_SOCKET
        self._sockaddr = _sockaddr(address) if address else None
        self.enabled: bool = self._sockaddr is not None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Notifier:
        """A notifier for ``$NOTIFY_SOCKET``; disabled (every call a no-op) without one.

        An address sd_notify(3) does not support also gives a disabled notifier.
        ``$NOTIFY_SOCKET`` is left in the environment.
        """
        return cls(os.environ.get("NOTIFY_SOCKET"))

    def notify(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines as one datagram, in argument order.

        Returns True if the datagram was sent; False if the notifier is disabled, a key is
        not an upper-case identifier, the datagram is too long, or the send failed. Never
        raises. Line breaks inside a value are replaced by spaces. Waits at most
        :data:`SEND_TIMEOUT_S` when the receiver's queue is full.
        """
        return self._notify(fields, block=True)

    def _notify(self, fields: dict[str, str | int], *, block: bool) -> bool:
        """:meth:`notify`; ``block`` False: never wait, drop the datagram if the queue is full (the
        periodic STATUS and WATCHDOG from the serving loop, which must not stall on a receiver
        that does not read)."""
        addr = self._sockaddr
        if addr is None or not fields:
            return False
        if not all(_KEY.match(key) for key in fields):
            return False
        data = "\n".join(f"{key}={_value(value)}" for key, value in fields.items()).encode()
        if len(data) > MAX_DATAGRAM:
            return False
        try:
            with self._lock:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.settimeout(SEND_TIMEOUT_S if block else 0.0)  # 0: non-blocking
                self._sock.sendto(data, addr)
        except (OSError, ValueError):  # ValueError: e.g. a NUL byte in a path
            return False
        return True

    def ready(self, status: str = "") -> None:
        """Start-up (or a reload) is complete: ``READY=1``, with ``STATUS=`` if given."""
        if status:
            self.notify(READY=1, STATUS=_clip(status))
        else:
            self.notify(READY=1)

    def status(self, text: str) -> None:
        """A one-line status shown by ``systemctl status``; dropped rather than waited for when the
        receiver's queue is full (the next one replaces it anyway)."""
        self._notify({"STATUS": _clip(text)}, block=False)

    def reloading(self) -> None:
        """A reload started; send :meth:`ready` when it is done.

        ``MONOTONIC_USEC`` (CLOCK_MONOTONIC in µs) lets systemd >= 253 tell this reload
        from an earlier one (Type=notify-reload); older versions ignore it.
        """
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.notify(RELOADING=1, MONOTONIC_USEC=usec)

    def stopping(self) -> None:
        """Shutdown has begun."""
        self.notify(STOPPING=1)

    def watchdog(self) -> None:
        """Keep-alive ping for ``WatchdogSec=``; never waits (a ping that cannot be queued now
        would not help by stalling the loop it vouches for)."""
        self._notify({"WATCHDOG": 1}, block=False)

    def extend_timeout(self, seconds: float) -> None:
        """Ask for ``seconds`` more from now before the start/stop/reload timeout fires."""
        if not math.isfinite(seconds):
            raise ValueError(f"extend_timeout: seconds must be finite, got {seconds!r}")
        self.notify(EXTEND_TIMEOUT_USEC=max(0, round(seconds * 1_000_000)))

    def close(self) -> None:
        """Close the socket. A later notification opens a new one."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def watchdog_interval() -> float | None:
    """Seconds between watchdog pings (half of ``WatchdogSec=``), or None if not asked for.

    Like sd_watchdog_enabled(3): ``$WATCHDOG_USEC`` must be a positive integer and
    ``$WATCHDOG_PID``, if set, must be this process's PID (the variables are inherited by
    children, which must not ping on the main process's behalf).
    """
    usec = _uint(os.environ.get("WATCHDOG_USEC"))
    if usec is None or usec == 0:
        return None
    pid_text = os.environ.get("WATCHDOG_PID")
    if pid_text is not None and _uint(pid_text) != os.getpid():
        return None
    return usec / 2 / 1_000_000


async def watchdog_loop(notifier: Notifier, interval: float) -> None:
    """Send ``WATCHDOG=1`` now and then every ``interval`` seconds until cancelled.

    It runs on the event loop on purpose: if the loop is blocked, the pings stop and
    systemd restarts the service.
    """
    if not (interval > 0 and math.isfinite(interval)):
        raise ValueError(f"watchdog_loop: interval must be a positive number, got {interval!r}")
    while True:
        notifier.watchdog()
        await asyncio.sleep(interval)
