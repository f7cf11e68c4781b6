"""systemd ``Type=notify`` support, speaking the protocol directly on ``$NOTIFY_SOCKET``.

Works without systemd: when ``NOTIFY_SOCKET`` is unset every call is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time


class SystemdNotifier:
    """Sends READY / STATUS / WATCHDOG / STOPPING datagrams.

    The watchdog interval is half of ``$WATCHDOG_USEC`` (when ``$WATCHDOG_PID`` is unset or ours).
    """

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET")
        self.address: str | None = None
        if address:
            self.address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC")
        wd_pid = env.get("WATCHDOG_PID")
        self.watchdog_interval_s: float | None = None
        if usec and (not wd_pid or wd_pid == str(os.getpid())):
            self.watchdog_interval_s = int(usec) / 2e6
        self._last_ping = 0.0
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, message: str) -> None:
        if self.address is None:
            return
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError):
            self._sock.sendto(message.encode(), self.address)

    def ready(self, status: str = "") -> None:
        self.send("READY=1\nSTATUS=" + status if status else "READY=1")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def watchdog(self, now: float | None = None) -> None:
        """Ping when the watchdog interval has elapsed since the last ping."""
        if self.watchdog_interval_s is None:
            return
        now = time.monotonic() if now is None else now
        if now - self._last_ping >= self.watchdog_interval_s:
            self.send("WATCHDOG=1")
            self._last_ping = now

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
