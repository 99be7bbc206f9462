"""How workers stop on SIGTERM and SIGINT while they run: one handler for the process stops
every worker running then, and the handlers that were there before the first came back when
the last ends, whatever order they end in. Only the main thread may set them: elsewhere
nothing is set, and such a worker stops by ``stop()``."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable, Dict, List, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: The running workers' stops, in the order they started.
_stops: List[Callable[[], Any]] = []
#: The handlers the first worker found, put back when the last ends.
_previous: Dict[signal.Signals, Any] = {}


def _on_signal(signum: int, frame: Optional[FrameType]) -> None:
    for stop in list(_stops):
        try:
            stop()
        except RuntimeError:
            pass  # its loop has closed: that worker has ended


def stop_on_signals(stop: Callable[[], Any]) -> Callable[[], None]:
    """Has SIGTERM and SIGINT call `stop` (which a signal handler may call: thread-safe, no
    waiting) while the worker runs; the function to call when it ends."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    # Listed before the handler is set, and the handlers put back before it is taken off the
    # list: a signal in between still stops it.
    first = not _stops
    _stops.append(stop)
    if first:
        _previous.update({s: signal.getsignal(s) for s in SIGNALS})
        for s in SIGNALS:
            signal.signal(s, _on_signal)

    def restore() -> None:
        if _stops == [stop]:
            for s, handler in _previous.items():
                # None: a handler set outside Python, which cannot be set again from here.
                if handler is not None and signal.getsignal(s) is _on_signal:
                    signal.signal(s, handler)
            _previous.clear()
        if stop in _stops:
            _stops.remove(stop)

    return restore
