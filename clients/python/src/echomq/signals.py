"""How a worker stops on SIGTERM and SIGINT while it runs: its handler stops it, and then the
handler it replaced if that is another worker's, so one signal stops every worker of the
process; the handlers that were there before come back when it ends. Only the main thread may
set them: elsewhere nothing is set."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(stop: Callable[[], Any]) -> Callable[[], None]:
    """Has SIGTERM and SIGINT call `stop` (thread-safe, as a signal handler's work must be);
    the function that puts back what was there before."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {s: signal.getsignal(s) for s in SIGNALS}

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        stop()
        before = previous.get(signal.Signals(signum))
        if callable(before) and getattr(before, "echomq_worker", False):
            before(signum, frame)

    setattr(on_signal, "echomq_worker", True)
    for s in SIGNALS:
        signal.signal(s, on_signal)

    def restore() -> None:
        for s, handler in previous.items():
            if signal.getsignal(s) is on_signal:
                signal.signal(s, handler)

    return restore
