# SPDX-License-Identifier: Apache-2.0
"""Whether a stored prefix is worth loading: the connector weighs the time to read it from the
store against the time the serving engine takes to compute it again, both measured while it
serves.

A tier that reads a token's KV slower than the engine computes it makes every hit slower than a
miss: loading a prefix there lengthens its request's time to first token, and recomputing
instead serves at least as well (docs/results.md, SV9, SV15). So:

- The worker measures (``Rates``, running totals sent with each step's worker report,
  ranks.py): the bytes its loads moved and how long those loads took, from the request's side
  (waiting for the store's load or save in progress included; for layerwise loads, whose reads
  the compute paces, the pipeline's own measure of the store's reads); and, for forward passes
  that compute at least ``MIN_STEP_TOKENS`` tokens and load nothing inside the step, the tokens
  computed and the pass's duration (``StepClock``: GPU time between two events on the compute
  stream with KV in GPU memory, the host clock otherwise). One such pass says how fast this
  model computes on this device (a first pass slowed by warm-up favours loading).
- The scheduler (``LoadPlanner``) keeps recent-weighted rates of both (the slowest rank's,
  with tensor parallelism) and plans each hit:
  - loads before the forward (asynchronous, the default for GPU KV, or synchronous): the whole
    hit when reading it, behind the loads already queued, takes no longer than computing it;
    otherwise none of it (the request computes the hit);
  - layerwise loads: layer l is read while layer l - 1 computes, so loading k of the T tokens
    the request would compute takes about max(k a, (T - k) c), with a and c the seconds a
    token takes to read and to compute. Where reading is the slower (a > c) the plan loads
    k = T c / (a + c) (whole blocks), or the whole hit where that is less; where it is the
    faster, the whole hit, which leaves the GPU to the other requests.
  - Recomputing costs GPU time the other requests share, loading only the store's: where the
    two take the same time, the hit loads.
  - A decision to recompute stops the reads it rests on: ``PROBE_S`` after the last measured
    load, one chunk of the next hit that would be recomputed is loaded, to measure again.
- Until both rates are measured (the first load, the first long prefills), every hit loads,
  as with ``"load_policy": "always"``, which never weighs.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# Forward passes computing fewer tokens are not timed: decode-heavy steps are bound by reading
# weights, not by tokens, and would make recomputing a long prefix look slower than it is.
MIN_STEP_TOKENS = 512
# Weight of what was measured before, per new measurement: recent loads and passes count most
# (a disk's rate moves with the writes beside it).
READ_DECAY = 0.5
COMPUTE_DECAY = 0.9
# Seconds without a measured load after which a hit that would be recomputed loads one chunk.
PROBE_S = 30.0
# GPU passes whose end events are still pending; more are not timed (the poll has fallen behind).
MAX_PENDING = 16
LOG_INTERVAL_S = 60.0


@dataclass
class Rates:
    """One rank's measurements, as running totals since its worker started."""

    load_bytes: int = 0  # bytes of chunks loaded
    load_ns: int = 0  # the time those loads took
    compute_tokens: int = 0  # tokens of the timed forward passes
    compute_ns: int = 0  # their duration


class StepClock:
    """Times the forward passes of one worker (``begin`` when the step's metadata is bound,
    before the forward; ``end`` after the forward is launched). With KV in GPU memory the two
    marks are CUDA events on the current stream and are read once the GPU has passed them."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self._open: tuple[Any, int] | None = None  # (start mark, tokens) of the pass under way
        self._pending: deque[tuple[Any, Any, int]] = deque()  # GPU passes not read yet
        self.tokens = 0
        self.ns = 0

    def begin(self, tokens: int) -> None:
        """A forward pass computing ``tokens`` starts (0: not to be timed)."""
        self.poll()
        self._open = None  # a pass without an end (no forward ran) is not timed
        if tokens >= MIN_STEP_TOKENS and len(self._pending) < MAX_PENDING:
            self._open = (self._mark(), tokens)

    def end(self) -> None:
        if self._open is None:
            return
        start, tokens = self._open
        self._open = None
        if self.gpu:
            self._pending.append((start, self._mark(), tokens))
        else:
            self._add(tokens, time.perf_counter_ns() - start)

    def poll(self) -> None:
        """Read the GPU passes that have completed."""
        while self._pending and self._pending[0][1].query():
            start, end, tokens = self._pending.popleft()
            self._add(tokens, int(start.elapsed_time(end) * 1e6))

    def _mark(self) -> Any:
        if not self.gpu:
            return time.perf_counter_ns()
        import torch

        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def _add(self, tokens: int, ns: int) -> None:
        if ns > 0:
            self.tokens += tokens
            self.ns += ns


class _Meter:
    """A recent-weighted rate from running totals: each new measurement (a delta of the
    totals) counts fully, everything before it ``decay`` times less."""

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.amount = 0.0
        self.seconds = 0.0
        self._last = (0, 0)

    def update(self, amount: int, ns: int) -> bool:
        """Fold in the totals; True where they moved."""
        d_amount, d_ns = amount - self._last[0], ns - self._last[1]
        self._last = (amount, ns)
        if d_amount <= 0 or d_ns <= 0:
            return False
        self.amount = self.amount * self.decay + d_amount
        self.seconds = self.seconds * self.decay + d_ns / 1e9
        return True

    def rate(self) -> float | None:
        """None until a measurement moved the totals."""
        return self.amount / self.seconds if self.seconds > 0 else None


class LoadPlanner:
    """The scheduler's side: how many tokens of a hit to load (module docstring)."""

    def __init__(self, bytes_per_token: float, block_size: int, chunk_tokens: int,
                 layerwise: bool, weigh: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bytes_per_token = bytes_per_token  # one rank's share
        self.block_size = block_size
        self.chunk_tokens = chunk_tokens
        self.layerwise = layerwise
        self.weigh = weigh
        self._clock = clock
        self._read: dict[int, _Meter] = {}  # rank -> its loads
        self._compute: dict[int, _Meter] = {}  # rank -> its forward passes
        self._read_at: float | None = None  # when a load was last measured
        self._probe_at: float | None = None  # when a probe was last granted
        self._logged: tuple[bool, float] | None = None  # (loading, when) of the last log line

    def update(self, rates: dict[int, Rates]) -> None:
        """Fold in the ranks' running totals (from the workers' metadata)."""
        for rank, r in rates.items():
            if self._read.setdefault(rank, _Meter(READ_DECAY)).update(r.load_bytes, r.load_ns):
                self._read_at = self._clock()
            self._compute.setdefault(rank, _Meter(COMPUTE_DECAY)).update(r.compute_tokens,
                                                                         r.compute_ns)

    def read_bytes_per_s(self) -> float | None:
        """The slowest rank's recent read rate (a load ends when every rank's has)."""
        rates = [m.rate() for m in self._read.values()]
        known = [r for r in rates if r is not None]
        return min(known) if known else None

    def compute_tokens_per_s(self) -> float | None:
        rates = [m.rate() for m in self._compute.values()]
        known = [r for r in rates if r is not None]
        return min(known) if known else None

    def plan(self, hit_tokens: int, compute_tokens: int, queued_bytes: int = 0) -> int:
        """Of ``hit_tokens`` found in the store (block-aligned), how many to load, for a request
        that would compute ``compute_tokens`` without loading; ``queued_bytes``: loads planned
        or under way that this one would wait behind."""
        if not self.weigh or hit_tokens <= 0:
            return hit_tokens
        read, compute = self.read_bytes_per_s(), self.compute_tokens_per_s()
        if read is None or compute is None:
            return hit_tokens
        a = self.bytes_per_token / read  # seconds to read a token
        c = 1.0 / compute  # seconds to compute one
        if self.layerwise:
            tokens = hit_tokens
            if a > c:  # reading is the slower: load the share the rest's compute hides
                balanced = int(compute_tokens * c / (a + c)) // self.block_size * self.block_size
                tokens = min(hit_tokens, balanced)
        else:
            load_s = (queued_bytes + hit_tokens * self.bytes_per_token) / read
            tokens = hit_tokens if load_s <= hit_tokens * c else 0
        self._say(tokens == hit_tokens, read, compute)
        if tokens == 0 and self._probe_due():
            tokens = min(hit_tokens, self.chunk_tokens)
        return tokens

    def _probe_due(self) -> bool:
        now = self._clock()
        last = max(t for t in (self._read_at, self._probe_at, float("-inf")) if t is not None)
        if now - last < PROBE_S:
            return False
        self._probe_at = now
        return True

    def _say(self, loading: bool, read: float, compute: float) -> None:
        """One log line when the verdict changes (at most one a minute)."""
        now = self._clock()
        if self._logged is not None and (self._logged[0] == loading
                                         or now - self._logged[1] < LOG_INTERVAL_S):
            return
        if self._logged is None and loading:
            self._logged = (True, now)  # loading is what the operator expects: nothing to say
            return
        self._logged = (loading, now)
        read_us = self.bytes_per_token / read * 1e6
        compute_us = 1e6 / compute
        if loading:
            log.info("tutti: the store reads a token's KV in %.1f us (%.2f GB/s), the model "
                     "computes one in %.1f us: stored prefixes are loaded again", read_us,
                     read / 1e9, compute_us)
        elif self.layerwise:
            log.info("tutti: the store reads a token's KV in %.1f us (%.2f GB/s), the model "
                     "computes one in %.1f us: layerwise loads take the share of a hit that the "
                     "computing of the rest hides", read_us, read / 1e9, compute_us)
        else:
            log.warning("tutti: the store reads a token's KV in %.1f us (%.2f GB/s), slower "
                        "than the model computes it (%.1f us): stored prefixes are recomputed "
                        "while that holds (\"load_policy\": \"always\" loads them anyway)",
                        read_us, read / 1e9, compute_us)
