"""The request window: how many requests, and how many bytes, one endpoint has in flight.

Every cloud store talking to the same endpoint in a process shares one :class:`Window`
(:func:`window_for`), whatever task, adapter or command uses it. The controller, its
constants and why they were chosen are in docs/ARCHITECTURE.md ("Request window"). In
short:

* **Window** (``cwnd``, requests): starts at :data:`INITIAL`, grows by one per completed
  request (slow start) up to ``ssthresh``, then by one per window (additive increase),
  only while demand fills it, and never past :data:`GAIN` x the bandwidth-delay product
  measured in requests (best delivery rate x shortest round trip; at least
  :data:`FLOOR`). Throughput that stops growing stops the window growing. Until the
  first throttling answer the ceiling also follows the requests completed in the
  last shortest round trip, counted at every completion (:data:`GAIN` x that), so on
  a round trip of at least :data:`LONG_ROUND_TRIP` slow start doubles per round trip instead of per
  :data:`RATE_SAMPLE` rate sample.
* **Throttling** (S3 ``SlowDown``/503, 429, GCS ``rateLimitExceeded``, Azure
  ``ServerBusy``): at most once per round trip the window is cut to :data:`BETA` times
  itself (down to one request). When most recent answers are refusals
  (:data:`PACE_REFUSED`: the rate is the problem, not scattered noise; with a short
  round trip even one request in flight passes the allowed rate), requests are paced
  too: the rate is cut to :data:`BETA` times what was delivered, then to :data:`BETA`
  times itself on each refusal (at most once per :data:`PACE_CUT` requests), climbs
  back linearly (:data:`RECOVERY` of itself per second) and is dropped after
  :data:`PACE_FORGET` seconds without throttling. ``Retry-After`` pauses every
  admission until it has passed. A throttled request gives its place back and queues
  again at the front (:meth:`Window.retry_after_throttle`): retries are paced by the
  window, not counted.
* **Bytes**: a request reserves the bytes it will hold (a write its length, a ranged
  read its span, a whole-object read an estimate: the mean size of whole reads so far)
  and waits while the reservations would pass ``max_bytes``; a single request larger
  than that runs alone. :attr:`Window.peak_bytes` records the high-water mark of bytes
  really in flight.
* **Reach** (:meth:`Window.reach`): the bytes the endpoint delivers in one round trip
  (best byte delivery rate x shortest round trip), counted only when that round trip
  is at least :data:`LONG_ROUND_TRIP`: how far range coalescing may over-fetch to save
  a request (:func:`asyncshard.partial.plan_key`).

The state is shared across event loops and threads (one lock); each waiter is woken,
and each pacing timer armed, on the waiter's own loop (:mod:`asyncshard.wakeups`).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Hashable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import TypeVar

from asyncshard.objects import GetResult
from asyncshard.ranges import ByteRange, Range, Suffix
from asyncshard.wakeups import Timers, grant

__all__ = [
    "BETA",
    "DEFAULT_MAX_BYTES",
    "FLOOR",
    "GAIN",
    "INITIAL",
    "Slot",
    "Window",
    "WindowState",
    "in_slot",
    "span_of",
    "window_for",
]

T = TypeVar("T")

#: Requests in flight before anything is measured: the old fixed bound, right on a LAN
#: (64 was measured and rejected: docs/ARCHITECTURE.md, "Request window").
INITIAL = 32
#: The ceiling from the bandwidth-delay product never goes below this.
FLOOR = 32
#: Requests in flight at most, whatever is measured (sockets and file descriptors).
HARD_MAX = 4096
#: The ceiling: this many bandwidth-delay products in flight (BBR's cwnd gain).
GAIN = 2.0
#: In slow start on a long round trip the window grows by this much per completion (4x
#: per round trip), up to this many times the completions of one round trip: answers on
#: connections the client has just opened come a round trip late (the handshake), so
#: that count lags the window while it grows (docs/ARCHITECTURE.md, "Request window").
STARTUP_STEP = 3.0
STARTUP_GAIN = 4.0
#: Multiplicative decrease on throttling (CUBIC's and the AWS SDKs' 0.7).
BETA = 0.7
#: A paced rate grows by this fraction of its value after the cut, per second.
RECOVERY = 0.5
#: Seconds without throttling after which pacing is dropped.
PACE_FORGET = 30.0
#: Pacing starts when this share of the recent answers (a moving average of gain
#: :data:`REFUSED_GAIN`) were throttling refusals; once paced, a throttling answer cuts
#: the rate while the share is above :data:`PACE_KEEP`, at most once per
#: :data:`PACE_CUT` paced requests.
PACE_REFUSED = 0.25
PACE_KEEP = 0.1
REFUSED_GAIN = 1 / 16
PACE_CUT = 8.0
#: Paced requests that may go at once to catch up with a timer that fired late.
PACE_BURST = 2.0
#: Slowest pacing rate, requests per second.
MIN_RATE = 1.0
#: Bytes in flight per endpoint at most, by default.
DEFAULT_MAX_BYTES = 256 << 20
#: What a whole-object read reserves before any has completed.
INITIAL_ESTIMATE = 1 << 20
#: Smallest interval between two cuts, seconds (a round trip, if longer).
MIN_SAMPLE = 0.01
#: Smallest interval over which a delivery rate is sampled, seconds.
RATE_SAMPLE = 0.1
#: Delivery-rate samples kept for the maximum; minimum round trips expire after this.
RATE_SAMPLES = 10
RTT_EXPIRY = 10.0
#: Shortest round trip, seconds, at which a request costs more waiting than work and
#: coalescing may over-fetch up to the :meth:`Window.reach` to save one.
LONG_ROUND_TRIP = 0.005


@dataclass
class Slot:
    """One admitted request: its reservation and when it started."""

    nbytes: int
    started: float
    actual: int | None = None  # bytes really held, once known (a whole read)


@dataclass
class _Waiter:
    nbytes: int
    future: asyncio.Future[Slot]


@dataclass
class WindowState:
    """A snapshot of a window's controller and counters (for tests and benchmarks)."""

    cwnd: float
    ssthresh: float
    in_flight: int
    waiting: int
    bytes_in_flight: int
    max_bytes: int
    peak_bytes: int
    peak_in_flight: int
    pace_rate: float | None
    delivery_rate: float
    min_rtt: float | None
    srtt: float | None
    completed: int
    throttles: int
    cuts: int


_current: contextvars.ContextVar[tuple[Window, Slot] | None] = contextvars.ContextVar(
    "asyncshard_window_slot", default=None
)


@dataclass(eq=False)
class Window:
    """One endpoint's adaptive request window; see the module docstring.

    Args:
        max_bytes: bytes reserved by requests in flight at most.
        max_requests: requests in flight at most (``None``: as measured).
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_requests: int | None = None
    cwnd: float = INITIAL
    ssthresh: float = math.inf
    in_flight: int = 0
    bytes_in_flight: int = 0
    peak_bytes: int = 0
    peak_in_flight: int = 0
    completed: int = 0
    throttles: int = 0
    cuts: int = 0
    srtt: float | None = None
    min_rtt: float | None = None
    _min_rtt_at: float = 0.0
    _rates: deque[float] = field(default_factory=lambda: deque(maxlen=RATE_SAMPLES))
    _byte_rates: deque[float] = field(default_factory=lambda: deque(maxlen=RATE_SAMPLES))
    _sample_bytes: int = 0
    _last_rtt: deque[float] = field(default_factory=deque)  # completions in one min_rtt
    _per_rtt: int = 0  # most completions seen within one min_rtt
    _done_at: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    _sample_start: float = field(default_factory=time.monotonic)
    _sample_done: int = 0
    _last_rate: float = 0.0
    _estimate: float = INITIAL_ESTIMATE
    _pace_base: float | None = None  # the rate after the last cut
    _pace_at: float = 0.0  # when it was cut
    _next_send: float = 0.0
    _last_cut: float = -math.inf
    _refused: float = 0.0  # moving share of answers that were throttling refusals
    _waiters: deque[_Waiter] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timers: Timers = field(init=False)  # pacing wake-ups, one per loop at most

    def __post_init__(self) -> None:
        self._timers = Timers(self._dispatch)

    # -- admission ----------------------------------------------------------------------

    @asynccontextmanager
    async def slot(self, nbytes: int | None) -> AsyncIterator[Slot]:
        """Hold a place for one request of ``nbytes`` (``None``: a whole-object read of
        unknown size, reserved at the estimate); a throttled request inside it may trade
        its place for a later one (:meth:`retry_after_throttle`)."""
        held = await self.acquire(nbytes)
        token = _current.set((self, held))
        try:
            yield held
        finally:
            entry = _current.get()  # the slot held now (a retry may have traded it)
            _current.reset(token)
            if entry is not None:
                self.release(entry[1])

    def estimate(self, nbytes: int | None) -> int:
        """The reservation of a request of ``nbytes`` (``None``: unknown size)."""
        return int(self._estimate) if nbytes is None else nbytes

    async def acquire(self, nbytes: int | None, *, front: bool = False) -> Slot:
        """Wait for a place; ``front``: ahead of every waiter (a retried request)."""
        size = self.estimate(nbytes)
        loop = asyncio.get_running_loop()
        with self._lock:
            now = time.monotonic()
            if not self._waiters and self._fits(size, now):
                return self._admit(size, now)
            waiter = _Waiter(size, loop.create_future())
            if front:
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
        self._dispatch()
        try:
            return await waiter.future
        except BaseException:
            with self._lock:
                granted = waiter.future.done() and not waiter.future.cancelled()
                if not granted:
                    with suppress(ValueError):
                        self._waiters.remove(waiter)
            if granted:
                self.release(waiter.future.result(), completed=False)
            else:  # it may have held back the waiters behind it
                self._dispatch()
            raise

    def release(self, held: Slot, *, completed: bool = True) -> None:
        """Give a place back; ``completed``: after a request, whose round trip counts."""
        now = time.monotonic()
        with self._lock:
            self._settle(held, now)
            if completed:
                self._measure(held, now)
        self._dispatch()

    async def retry_after_throttle(self, retry_after: float | None = None) -> None:
        """Record a throttling answer to the running request, give its place back and
        queue again at the front: the retry waits for the cut window and its pacing
        (and for ``retry_after`` seconds, when the server said so)."""
        self.throttled(retry_after)
        entry = _current.get()
        if entry is None or entry[0] is not self:
            held = await self.acquire(0, front=True)  # a request outside a slot: paced
            self.release(held, completed=False)
            return
        _, old = entry
        with self._lock:
            self._settle(old, time.monotonic())
        _current.set(None)  # nothing held while waiting (cancelled: nothing to give back)
        self._dispatch()
        _current.set((self, await self.acquire(old.nbytes, front=True)))

    def throttled(self, retry_after: float | None = None) -> None:
        """Record a throttling answer: cut the window (at most once per round trip),
        or, once it is down to one request, the pacing rate; pause admissions for
        ``retry_after`` seconds."""
        now = time.monotonic()
        with self._lock:
            self.throttles += 1
            self._refused += REFUSED_GAIN * (1.0 - self._refused)
            if retry_after is not None and retry_after > 0:
                self._next_send = max(self._next_send, now + retry_after)
            paced = self._pace(now)
            gap = max(self.srtt or 0.0, MIN_SAMPLE, 0.0 if paced is None else PACE_CUT / paced)
            if now - self._last_cut < gap:
                return
            self._last_cut = now
            self.cuts += 1
            self.ssthresh = self.cwnd = max(1.0, self.cwnd * BETA)
            if self._refused < (PACE_REFUSED if paced is None else PACE_KEEP):
                return  # scattered refusals: the window alone answers them
            # most answers are refusals: the rate, not the window, must come down (a
            # round trip so short that a few requests in flight pass the allowed rate)
            measured = self._delivery_rate(now)
            if paced is None and not measured:
                return  # nothing delivered to measure yet: the next refusal paces
            sending = max(measured, MIN_RATE) if paced is None else paced
            self._pace_base = max(MIN_RATE, sending * BETA)
            self._pace_at = now

    def set_max_bytes(self, max_bytes: int) -> None:
        """Lower the byte bound (stores sharing a window get the smallest one asked)."""
        with self._lock:
            self.max_bytes = min(self.max_bytes, max_bytes)

    def set_max_requests(self, max_requests: int) -> None:
        """Lower the request bound (the smallest one asked)."""
        with self._lock:
            self.max_requests = min(self.max_requests or max_requests, max_requests)

    def state(self) -> WindowState:
        """A snapshot of the controller and its counters."""
        now = time.monotonic()
        with self._lock:
            return WindowState(
                cwnd=self.cwnd,
                ssthresh=self.ssthresh,
                in_flight=self.in_flight,
                waiting=len(self._waiters),
                bytes_in_flight=self.bytes_in_flight,
                max_bytes=self.max_bytes,
                peak_bytes=self.peak_bytes,
                peak_in_flight=self.peak_in_flight,
                pace_rate=self._pace(now),
                delivery_rate=self._delivery_rate(now),
                min_rtt=self.min_rtt,
                srtt=self.srtt,
                completed=self.completed,
                throttles=self.throttles,
                cuts=self.cuts,
            )

    def reach(self) -> int:
        """Bytes the endpoint delivers in one round trip (best byte delivery rate x
        shortest round trip); 0 while that round trip is below :data:`LONG_ROUND_TRIP`
        or nothing has been measured."""
        with self._lock:
            rtt = self.min_rtt or 0.0
            if rtt < LONG_ROUND_TRIP:
                return 0
            return int(max(self._byte_rates, default=0.0) * rtt)

    def assume(self, round_trip: float, byte_rate: float) -> None:
        """Seed the measurements with a link of ``round_trip`` seconds delivering
        ``byte_rate`` bytes per second (later measurements replace them as they come).

        Args:
            round_trip: the shortest round trip, seconds.
            byte_rate: bytes delivered per second.
        """
        with self._lock:
            self.min_rtt, self._min_rtt_at = round_trip, time.monotonic()
            self._byte_rates.append(byte_rate)

    def rate(self) -> float:
        """Requests per second completed lately (what :class:`ThrottledError` names)."""
        with self._lock:
            return self._delivery_rate(time.monotonic())

    # -- internals (called with the lock held, except _dispatch) ------------------------

    def _limit(self) -> int:
        bdp = (max(self._rates, default=0.0)) * (self.min_rtt or 0.0)
        gain = GAIN
        if self.ssthresh == math.inf:  # slow start, never throttled: per round trip
            bdp, gain = max(bdp, self._per_rtt), STARTUP_GAIN
        ceiling = max(FLOOR, gain * bdp)
        if self.max_requests is not None:
            ceiling = min(ceiling, self.max_requests)
        self.cwnd = min(self.cwnd, max(ceiling, 1.0), HARD_MAX)
        return max(1, int(self.cwnd))

    def _fits(self, size: int, now: float) -> bool:
        if self.in_flight >= self._limit() or now < self._next_send:
            return False
        return self.in_flight == 0 or self.bytes_in_flight + size <= self.max_bytes

    def _admit(self, size: int, now: float) -> Slot:
        if self.in_flight == 0 and self._sample_done == 0:  # idle until now: not sampled
            self._sample_start = now
        self.in_flight += 1
        self.bytes_in_flight += size
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.peak_bytes = max(self.peak_bytes, self.bytes_in_flight)
        rate = self._pace(now)
        if rate is not None:  # a late timer is caught up with: up to PACE_BURST at once
            self._next_send = max(self._next_send, now - PACE_BURST / rate) + 1.0 / rate
        return Slot(size, now)

    def _settle(self, held: Slot, now: float) -> None:
        """Take ``held``'s reservation back (its real size counted first, if larger)."""
        if held.actual is not None and held.actual > held.nbytes:
            self.peak_bytes = max(self.peak_bytes, self.bytes_in_flight - held.nbytes + held.actual)
        self.in_flight -= 1
        self.bytes_in_flight -= held.nbytes

    def _measure(self, held: Slot, now: float) -> None:
        rtt = now - held.started
        self.completed += 1
        self._done_at.append(now)
        self._refused -= REFUSED_GAIN * self._refused
        self.srtt = rtt if self.srtt is None else 0.875 * self.srtt + 0.125 * rtt
        if self.min_rtt is None or rtt < self.min_rtt or now - self._min_rtt_at > RTT_EXPIRY:
            self.min_rtt, self._min_rtt_at = rtt, now
        if held.actual is not None:
            self._estimate = 0.9 * self._estimate + 0.1 * max(held.actual, 1)
        if self.min_rtt >= LONG_ROUND_TRIP:  # a loop's batch of completions is no rate
            recent = self._last_rtt
            recent.append(now)
            while recent[0] < now - self.min_rtt:
                recent.popleft()
            self._per_rtt = max(self._per_rtt, len(recent))
        self._sample_done += 1
        self._sample_bytes += held.nbytes if held.actual is None else held.actual
        elapsed = now - self._sample_start
        if elapsed >= max(RATE_SAMPLE, self.srtt):
            self._last_rate = self._sample_done / elapsed
            self._rates.append(self._last_rate)
            self._byte_rates.append(self._sample_bytes / elapsed)
            self._sample_start, self._sample_done, self._sample_bytes = now, 0, 0
        demand = self.in_flight + 1 >= int(self.cwnd) or bool(self._waiters)
        if demand and now - self._last_cut > self.srtt:
            step = STARTUP_STEP if self.min_rtt >= LONG_ROUND_TRIP else 1.0
            self.cwnd += step if self.cwnd < self.ssthresh else 1.0 / self.cwnd

    def _delivery_rate(self, now: float) -> float:
        """Requests completed per second lately: over the last :data:`RATE_SAMPLE`
        seconds or four round trips, from the first completion in that span."""
        span = max(RATE_SAMPLE, 4 * (self.srtt or 0.0))
        done, first = 0, now
        for at in reversed(self._done_at):
            if at < now - span:
                break
            done, first = done + 1, at
        if done < 2:
            return 0.0
        return (done - 1) / max(now - first, MIN_SAMPLE)

    def _pace(self, now: float) -> float | None:
        if self._pace_base is None:
            return None
        since = now - self._pace_at
        if since > PACE_FORGET and now - self._last_cut > PACE_FORGET:
            self._pace_base = None
            return None
        return self._pace_base * (1.0 + RECOVERY * since)

    def _dispatch(self) -> None:
        """Admit waiters in order while they fit; wake each on its own loop."""
        grants: list[tuple[asyncio.Future[Slot], Slot]] = []
        wake: tuple[asyncio.AbstractEventLoop, float] | None = None
        with self._lock:
            now = time.monotonic()
            while self._waiters:
                head = self._waiters[0]
                loop = head.future.get_loop()
                if head.future.done() or loop.is_closed():  # cancelled, or its loop gone
                    self._waiters.popleft()
                    continue
                if not self._fits(head.nbytes, now):
                    if now < self._next_send and self.in_flight < self._limit():
                        wake = loop, self._next_send
                    break
                self._waiters.popleft()
                grants.append((head.future, self._admit(head.nbytes, now)))
        for future, held in grants:
            grant(future, held, self._give_back)
        if wake is not None:  # on the head waiter's loop, which lives as long as it does
            self._timers.arm(*wake)

    def _give_back(self, held: Slot) -> None:
        self.release(held, completed=False)  # granted, but nobody is left to use it


_windows: dict[Hashable, Window] = {}
_windows_lock = threading.Lock()


def window_for(key: Hashable) -> Window:
    """The process's window for the endpoint ``key`` (made on first use)."""
    with _windows_lock:
        window = _windows.get(key)
        if window is None:
            window = _windows[key] = Window()
        return window


async def in_slot(window: Window | None, awaitable: Awaitable[T], nbytes: int | None) -> T:
    """``awaitable`` run in a slot of ``window`` reserving ``nbytes`` (``None``: a whole
    read of unknown size, whose real size is recorded once known); no window: as is."""
    if window is None:
        return await awaitable
    async with window.slot(nbytes) as held:
        value = await awaitable
        if nbytes is None:
            data = value.data if isinstance(value, GetResult) else value
            if isinstance(data, (bytes, bytearray, memoryview)):
                held.actual = len(data)
        return value


def span_of(byte_range: ByteRange | None) -> int | None:
    """The bytes a read of ``byte_range`` holds at most (``None``: not known up front)."""
    if isinstance(byte_range, Range):
        return byte_range.end - byte_range.start
    if isinstance(byte_range, Suffix):
        return byte_range.length
    return None
