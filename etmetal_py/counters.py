"""Device-memory traffic counters of kernel dispatches (etmetal_counters_* in etmetal.h).

Needs the CPU device with ETMETAL_COUNTERS=1 in the environment before the library loads::

    with etmetal_py.counters() as c:
        run_something()
    for d in c.dispatches:
        print(d.kernel, d.threads, d.threadgroups, d.bytes_read, d.bytes_written)

``c.dispatches`` is filled when the block ends (the calling thread's stream is submitted and
waited for first, so everything encoded inside the block is counted).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._ffi import check, ffi, lib


@dataclass(frozen=True)
class DispatchCounters:
    kernel: str
    threads: int
    threadgroups: int
    bytes_read: int
    bytes_written: int


class counters:
    """Context manager recording every dispatch executed while it is open."""

    def __init__(self) -> None:
        self.dispatches: list[DispatchCounters] = []

    def __enter__(self) -> "counters":
        check(lib.etmetal_counters_begin())
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        count = ffi.new("int64_t*")
        status = lib.etmetal_counters_end(count)
        if exc_type is not None:
            return  # the block's own exception is the one to report
        check(status)
        record = ffi.new("etmetal_dispatch_counters_t*")
        dispatches = []
        for index in range(count[0]):
            check(lib.etmetal_counters_read(index, record))
            dispatches.append(DispatchCounters(
                kernel=ffi.string(record.kernel).decode(), threads=record.threads,
                threadgroups=record.threadgroups, bytes_read=record.bytes_read,
                bytes_written=record.bytes_written))
        self.dispatches = dispatches
