# SPDX-License-Identifier: Apache-2.0
"""The load plan (tutti/serving/planner.py): what the worker measures, how the scheduler weighs a
hit with it, and how the measurements travel in the worker metadata."""

import time

import pytest

pytest.importorskip("vllm")

from tutti.serving import planner  # noqa: E402
from tutti.serving.planner import LoadPlanner, Rates, StepClock  # noqa: E402
from tutti.vllm.data import TuttiWorkerMetadata  # noqa: E402

TOKEN_BYTES = 128 * 1024  # a Llama-3-8B token's KV
BLOCK = 16
CHUNK = 256
GB = 1e9
S = 10**9  # ns


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def measured(read_gbps, compute_tokens_per_s, steps=1):
    """Running totals of a rank that loaded at ``read_gbps`` and computed
    ``compute_tokens_per_s`` over ``steps`` measurements."""
    return [Rates(load_bytes=int(read_gbps * GB) * i, load_ns=S * i,
                  compute_tokens=int(compute_tokens_per_s) * i, compute_ns=S * i)
            for i in range(1, steps + 1)]


def planned(read_gbps, compute_tokens_per_s, layerwise=False, weigh=True, clock=None):
    p = LoadPlanner(TOKEN_BYTES, BLOCK, CHUNK, layerwise=layerwise, weigh=weigh,
                    clock=clock or Clock())
    for r in measured(read_gbps, compute_tokens_per_s):
        p.update({0: r})
    return p


def test_every_hit_loads_until_both_rates_are_measured():
    p = LoadPlanner(TOKEN_BYTES, BLOCK, CHUNK, layerwise=False)
    assert p.plan(16384, 16400) == 16384
    p.update({0: Rates(load_bytes=2 * 10**9, load_ns=S)})  # a slow read, no compute measured
    assert p.read_bytes_per_s() == pytest.approx(2e9)
    assert p.compute_tokens_per_s() is None
    assert p.plan(16384, 16400) == 16384
    p.update({0: Rates(load_bytes=2 * 10**9, load_ns=S, compute_tokens=33000, compute_ns=S)})
    assert p.compute_tokens_per_s() == pytest.approx(33000)
    assert p.plan(16384, 16400) == 0


def test_a_store_slower_than_compute_recomputes_a_faster_one_loads():
    # Reading a token takes 67 us at 1.97 GB/s, computing one 30 us at 33K tokens/s (a
    # disk's case, docs/results.md SV9): recompute.
    assert planned(1.97, 33000).plan(16384, 16400) == 0
    # 4.4 us a token at 30 GB/s (emulated NVMe's case): load.
    assert planned(30, 33000).plan(16384, 16400) == 16384
    # Equal times: load (the GPU is left to the other requests).
    assert planned(TOKEN_BYTES * 33000 / GB, 33000).plan(16384, 16400) == 16384


def test_loads_queued_ahead_count_against_loading():
    p = planned(10, 33000)  # 13 us a token against 30: load, unless the loader is busy
    assert p.plan(8192, 8200) == 8192
    queued = 8192 * 3 * TOKEN_BYTES  # three such loads ahead: 4 x 13 us > 30 us a token
    assert p.plan(8192, 8200, queued_bytes=queued) == 0


def test_layerwise_loads_the_share_the_compute_of_the_rest_hides():
    a = TOKEN_BYTES / 1.97e9
    c = 1 / 33000
    p = planned(1.97, 33000, layerwise=True)
    k = p.plan(16384, 16400)
    assert k % BLOCK == 0 and k > 0
    assert k == pytest.approx(16400 * c / (a + c), abs=BLOCK)
    # A fast store: the whole hit.
    assert planned(30, 33000, layerwise=True).plan(16384, 16400) == 16384


def test_load_policy_always_never_weighs():
    assert planned(0.1, 33000, weigh=False).plan(16384, 16400) == 16384


def test_a_stale_read_rate_is_measured_again_with_one_chunk():
    clock = Clock()
    p = planned(1.97, 33000, clock=clock)
    assert p.plan(16384, 16400) == 0
    clock.now += planner.PROBE_S + 1
    assert p.plan(16384, 16400) == CHUNK  # a probe
    assert p.plan(16384, 16400) == 0  # one per interval
    assert p.plan(128, 200) == 0
    clock.now += planner.PROBE_S + 1
    assert p.plan(128, 200) == 128  # never more than the hit
    # The probe's load, measured fast this time, turns the plan back to loading.
    p.update({0: Rates(load_bytes=int(1.97 * GB) + 30 * 10**9, load_ns=2 * S,
                       compute_tokens=33000, compute_ns=S)})
    assert p.plan(16384, 16400) == 16384


def test_recent_measurements_count_most():
    p = planned(30, 33000)
    totals = measured(30, 33000)[-1]
    for _ in range(8):  # the disk slows down to 1 GB/s
        totals = Rates(totals.load_bytes + 10**9, totals.load_ns + S, totals.compute_tokens,
                       totals.compute_ns)
        p.update({0: totals})
    assert p.read_bytes_per_s() < 2 * GB
    assert p.plan(16384, 16400) == 0


def test_the_slowest_rank_sets_the_read_rate():
    p = LoadPlanner(TOKEN_BYTES, BLOCK, CHUNK, layerwise=False)
    for fast, slow in zip(measured(30, 33000), measured(1, 33000), strict=True):
        p.update({0: fast, 1: slow})
    assert p.read_bytes_per_s() == pytest.approx(1e9)
    assert p.plan(4096, 4100) == 0


def test_step_clock_times_long_passes_on_the_host():
    clock = StepClock(gpu=False)
    clock.begin(planner.MIN_STEP_TOKENS - 1)  # a decode step: not timed
    clock.end()
    assert (clock.tokens, clock.ns) == (0, 0)
    clock.begin(2048)
    time.sleep(0.01)
    clock.end()
    assert clock.tokens == 2048 and clock.ns >= 10**7
    clock.begin(4096)  # a step whose forward never ended (vLLM skipped it): not counted
    clock.begin(1024)
    clock.end()
    assert clock.tokens == 2048 + 1024
    clock.end()  # an end without a begin
    assert clock.tokens == 2048 + 1024


def test_worker_metadata_keeps_each_ranks_latest_totals():
    a = TuttiWorkerMetadata({}, {0: Rates(10, 1, 0, 0), 1: Rates(50, 5, 0, 0)})
    b = TuttiWorkerMetadata({}, {0: Rates(20, 2, 0, 0)})
    out = a.aggregate(b)
    assert out.rates == {0: Rates(20, 2, 0, 0), 1: Rates(50, 5, 0, 0)}
    assert TuttiWorkerMetadata({}, {0: Rates(5, 1, 0, 0)}).aggregate(
        TuttiWorkerMetadata({}, {})).rates == {0: Rates(5, 1, 0, 0)}
