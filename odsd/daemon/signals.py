"""Signal handling for the foreground daemon."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

log = logging.getLogger("odsd.daemon")


class SignalHandlers:
    """SIGTERM/SIGINT: first stops gracefully, second drops uncommitted episodes. SIGHUP: reload policies.

    >>> with SignalHandlers() as signals:
    ...     collector.run(signals.stop, abort=signals.abort)
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.abort = threading.Event()
        self.reload = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalHandlers:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            log.info("SIGHUP: the policy directory is reloaded at the next iteration boundary")
            self.reload.set()
        elif self.stop.is_set():
            log.warning(
                "%s again: dropping episodes not yet committed; a partial episode is never committed", name
            )
            self.abort.set()
        else:
            log.info("%s: finishing the step, discarding partial episodes, committing finished ones", name)
            self.stop.set()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
