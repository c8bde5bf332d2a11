"""Reading dispatch traces (ETMETAL_TRACE=out.json): the Chrome / Perfetto JSON that
libetmetal writes, summarised per kernel.

`etmetal trace summary out.json` prints `format_summary(summarize(load(path)))`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass
class KernelStats:
    name: str
    library: str
    count: int = 0
    total_us: float = 0.0  # 0 where the device timed only whole command buffers (Metal)

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass
class TraceSummary:
    kernels: list[KernelStats] = field(default_factory=list)
    dispatches: int = 0
    dispatch_us: float = 0.0
    transfers: int = 0  # copies and fills
    transfer_us: float = 0.0
    command_buffers: int = 0
    command_buffer_us: float = 0.0
    commits: int = 0
    waits: int = 0
    wait_us: float = 0.0
    span_us: float = 0.0  # first event to last
    timed_dispatches: bool = True


def load(path: str) -> list[dict]:
    """The trace's events. A trace cut short (the process was killed before it exited) lacks
    the closing bracket; it is read up to its last complete event."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    try:
        events = json.loads(text)
    except json.JSONDecodeError as exc:
        if not text.lstrip().startswith("["):
            raise ValueError(f"{path} is not an etmetal trace: {exc}") from None
        cut = text.rstrip().rstrip(",")
        cut = cut[:cut.rfind("}") + 1] if "}" in cut else "["
        try:
            events = json.loads(cut + "\n]")
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not an etmetal trace: {exc}") from None
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    if not isinstance(events, list):
        raise ValueError(f"{path} is not an etmetal trace: no list of events")
    return [e for e in events if isinstance(e, dict)]


def summarize(events: list[dict]) -> TraceSummary:
    summary = TraceSummary()
    kernels: dict[tuple[str, str], KernelStats] = {}
    first, last = None, None
    for event in events:
        phase, category = event.get("ph"), event.get("cat")
        if phase not in ("X", "i"):
            continue
        start = float(event.get("ts", 0.0))
        duration = float(event.get("dur", 0.0)) if phase == "X" else 0.0
        first = start if first is None else min(first, start)
        last = start + duration if last is None else max(last, start + duration)
        if category == "dispatch":
            args = event.get("args", {})
            key = (str(event.get("name", "?")), str(args.get("library", "")))
            stats = kernels.setdefault(key, KernelStats(*key))
            stats.count += 1
            stats.total_us += duration
            summary.dispatches += 1
            summary.dispatch_us += duration
            if phase == "i":
                summary.timed_dispatches = False
        elif category in ("copy", "fill"):
            summary.transfers += 1
            summary.transfer_us += duration
        elif category == "command_buffer":
            summary.command_buffers += 1
            summary.command_buffer_us += duration
        elif category == "commit":
            summary.commits += 1
        elif category == "wait":
            summary.waits += 1
            summary.wait_us += duration
    summary.kernels = sorted(kernels.values(), key=lambda k: (-k.total_us, -k.count, k.name))
    summary.span_us = (last - first) if first is not None else 0.0
    return summary


def _table(kernels: list[KernelStats], total_us: float, timed: bool) -> list[str]:
    width = max([len("kernel")] + [len(k.name) for k in kernels])
    lines = [f"  {'kernel':<{width}}  {'count':>7}  {'total ms':>9}  {'mean us':>9}  {'share':>6}  library"]
    for k in kernels:
        if timed:
            share = f"{100 * k.total_us / total_us:5.1f}%" if total_us else "     -"
            times = f"{k.total_us / 1e3:9.3f}  {k.mean_us:9.1f}  {share:>6}"
        else:
            times = f"{'-':>9}  {'-':>9}  {'-':>6}"
        lines.append(f"  {k.name:<{width}}  {k.count:>7}  {times}  {k.library}")
    return lines


def format_summary(summary: TraceSummary, top: int = 15) -> str:
    lines = [
        f"trace span {summary.span_us / 1e3:.3f} ms; {summary.command_buffers} command buffers "
        f"({summary.command_buffer_us / 1e3:.3f} ms executing), {summary.commits} commits, "
        f"{summary.waits} waits ({summary.wait_us / 1e3:.3f} ms waiting)",
        f"{summary.dispatches} dispatches of {len(summary.kernels)} kernels"
        + (f" ({summary.dispatch_us / 1e3:.3f} ms)" if summary.timed_dispatches else
           " (the device timed only whole command buffers)")
        + f"; {summary.transfers} copies/fills ({summary.transfer_us / 1e3:.3f} ms)",
    ]
    if not summary.kernels:
        return "\n".join(lines)
    timed = summary.timed_dispatches
    if timed:
        lines += ["", "top kernels by time:"]
        lines += _table(summary.kernels[:top], summary.dispatch_us, timed)
    by_count = sorted(summary.kernels, key=lambda k: (-k.count, -k.total_us, k.name))
    lines += ["", "top kernels by count:"]
    lines += _table(by_count[:top], summary.dispatch_us, timed)
    return "\n".join(lines)
