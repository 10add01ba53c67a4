"""Ctrl-C and shardload.cancel() for the long C calls (load, reshard, synth, write_manifest).

Python runs its signal handlers on the main thread between bytecodes, so a KeyboardInterrupt
pressed during a C call that lasts a minute would wait for the minute. On the main thread the
call therefore runs on a worker thread while the main thread waits in short joins, which a
signal interrupts: the handler's KeyboardInterrupt asks the library to stop (sl_cancel), the
call fails within a read request with its files cleaned up, and the KeyboardInterrupt goes on.
sl_cancel is process-wide: every shardload call running in the process stops.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, TypeVar

from . import _native as N

T = TypeVar("T")
_POLL_S = 0.05   # how soon a signal is seen: it only has to be short next to a load


def cancel() -> None:
    """Asks every shardload load, reshard, synth and write_manifest running in this process to
    stop: each raises CancelledError (KeyboardInterrupt where Ctrl-C asked). The request holds,
    and refuses later calls, until clear_cancel()."""
    N.lib.sl_cancel()


def clear_cancel() -> None:
    """Withdraws a cancel() request so that later calls run."""
    N.lib.sl_cancel_clear()


def call(fn: Callable[[], T]) -> T:
    """fn() (one C call), stopped by Ctrl-C as described above."""
    if threading.current_thread() is not threading.main_thread():
        return fn()   # signals reach the main thread only: nothing to wait for here
    # A Future, not Thread.join: a KeyboardInterrupt inside join can leave the thread looking
    # finished while it runs on (CPython gh-90882), and the cancel would be withdrawn too early.
    pending: Future[T] = Future()

    def work() -> None:
        try:
            pending.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            pending.set_exception(e)

    try:   # start() too: the call may already be running when a signal lands in start()
        threading.Thread(target=work, name="shardload-call", daemon=True).start()
        while not pending.done():
            wait([pending], timeout=_POLL_S)
    except BaseException:
        stop(pending)   # stops within one read request, files cleaned up
        raise
    return pending.result()


def stop(pending: Future[Any] | None) -> None:
    """After a KeyboardInterrupt on the thread that waits for `pending` (a C call on a worker: call
    above, shardload.jax's loader thread): asks it to stop, waits until it has (a second Ctrl-C
    must not leave it running with the request withdrawn; the wait is one read request or one
    file write at most), withdraws the request. The caller then re-raises."""
    N.lib.sl_cancel()
    try:
        while pending is not None and not pending.done():
            try:
                wait([pending], timeout=_POLL_S)
            except KeyboardInterrupt:
                continue
    finally:
        N.lib.sl_cancel_clear()
