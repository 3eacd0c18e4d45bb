"""What every Python process Spark starts for the job does first."""

from __future__ import annotations

import signal
import threading

_done = False


def leave_sigint_to_the_driver() -> None:
    """Ignore SIGINT in a Python worker (once per process).

    A terminal's Ctrl-C reaches every process of the job: the driver stops the query cleanly
    (cancelling the running tasks), while pyspark's workers would each raise KeyboardInterrupt
    in the middle of a task and print its traceback. SIGTERM keeps its default (Spark stops its
    workers with it)."""
    global _done
    if _done or threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _done = True
