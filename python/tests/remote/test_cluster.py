# SPDX-License-Identifier: Apache-2.0
"""The remote tier against a real Mooncake Store cluster on loopback (cluster.py)."""

import errno
import re
import time

N = 8


def test_publish_on_one_node_fetch_on_another_bit_exact(nodes):
    a, b = nodes(0), nodes(1)
    out = a.call("save_publish", seed=1, chunks=N)
    assert out["saved"] == [0] * N and out["published"] == [0] * N and out["flushed"]
    st = a.call("stats")["remote"]
    assert st["publish_chunks"] == N and st["publish_dropped"] == 0

    found = b.call("lookup", seed=1, chunks=N)
    assert found["local"] == 0 and found["remote"] == N
    got = b.call("fetch", seed=1, chunks=N, promote=True)
    assert got["loaded"] == N and got["status"] == [0] * N
    assert all(got["exact"])
    assert got["promoted"] == [0] * N  # now in node b's own store
    local = b.call("load_local", seed=1, chunks=N)
    assert local["loaded"] == N and all(local["exact"])
    st = b.call("stats")["remote"]
    assert st["fetch_chunks"] == N and st["verify_failures"] == 0 and st["up"] == 1

    # Publishing again is deduplicated: known locally, then known to the pool.
    again = a.call("save_publish", seed=1, chunks=N)
    assert again["published"] == [1] * N
    c = nodes(2)
    out = c.call("save_publish", seed=1, chunks=N)
    assert out["published"] == [0] * N and out["flushed"]
    st = c.call("stats")["remote"]
    assert st["publish_present"] == N and st["publish_chunks"] == 0


def test_fetch_from_the_middle_of_a_chain(nodes):
    a, b = nodes(0), nodes(1)
    a.call("save_publish", seed=2, chunks=N)
    got = b.call("fetch", seed=2, chunks=N, first=3)
    assert got["loaded"] == N - 3 and all(got["exact"])
    # a chain another node never published misses cleanly
    miss = b.call("fetch", seed=99, chunks=3)
    assert miss["loaded"] == 0 and miss["status"][0] == -2 and all(miss["untouched"])
    assert b.call("lookup", seed=99, chunks=3)["remote"] == 0


def test_tp2_ranks_agree(nodes):
    # node 0 runs ranks 0 and 1; rank 1 never publishes chunk 5
    r0, r1 = nodes(0, rank=0, nr_ranks=2), nodes(0, rank=1, nr_ranks=2)
    assert r0.call("save_publish", seed=3, chunks=N)["flushed"]
    assert r1.call("save_publish", seed=3, chunks=N, skip=[5])["flushed"]
    # node 1's ranks both see a hit of 5 chunks: a chunk counts only when every rank has it
    s0, s1 = nodes(1, rank=0, nr_ranks=2), nodes(1, rank=1, nr_ranks=2)
    assert s0.call("lookup", seed=3, chunks=N)["remote"] == 5
    assert s1.call("lookup", seed=3, chunks=N)["remote"] == 5
    f0 = s0.call("fetch", seed=3, chunks=5)
    f1 = s1.call("fetch", seed=3, chunks=5)
    assert f0["loaded"] == f1["loaded"] == 5 and all(f0["exact"]) and all(f1["exact"])
    # each rank got its own bytes, not the other's: rank 1 fetching chunk 5 fails
    assert s1.call("fetch", seed=3, chunks=6)["status"][5] == -2
    # a single-rank node (another TP shape) shares nothing with them
    single = nodes(2)
    assert single.call("lookup", seed=3, chunks=N)["remote"] == 0


def test_forged_or_damaged_records_are_rejected(nodes, cluster):
    a, b = nodes(0), nodes(1)
    a.call("save_publish", seed=4, chunks=N)
    # chunk 2: one byte of layer 1's object flipped; chunk 4: its header damaged;
    # chunk 6: cut short
    assert a.call("forge", seed=4, chunks=N, chunk=2, flip=4096 + 40000)["put"] == 0
    assert a.call("forge", seed=4, chunks=N, chunk=4, flip=100)["put"] == 0
    assert a.call("forge", seed=4, chunks=N, chunk=6, length=8192)["put"] == 0
    got = b.call("fetch", seed=4, chunks=N)
    assert got["status"][:2] == [0, 0] and all(got["exact"][:2])
    assert got["status"][2] == -74  # EBADMSG
    assert got["status"][3:] == [-125] * (N - 3)  # ECANCELED: a chain stops at its first hole
    assert all(got["untouched"][2:])  # nothing unverified reached the KV
    assert b.call("fetch", seed=4, chunks=5, first=4)["status"][0] == -74
    assert b.call("fetch", seed=4, chunks=7, first=6)["status"][0] == -74
    assert b.call("stats")["remote"]["verify_failures"] == 3

    # another namespace's valid record under this namespace's key: rejected by its tag
    c = nodes(2, ns="other-model")
    c.call("save_publish", seed=5, chunks=2)
    assert c.call("forge", seed=5, chunks=2, chunk=0, src_ns="other-model")["put"] == 0
    assert a.call("forge", seed=5, chunks=2, chunk=0, src_ns="other-model")["put"] == 0
    got = b.call("fetch", seed=5, chunks=1)
    assert got["status"] == [-74] and all(got["untouched"])


def test_capacity_pressure_evicts_without_errors(nodes, cluster):
    big = dict(nr_layers=4, nr_kv_heads=8, head_dim=128, elem_bytes=2, kv_planes=2,
               block_tokens=16, chunk_tokens=256)  # 1 MiB objects, 4 MiB + 4 KiB records
    a = nodes(0, geometry=big, nr_blocks=256, capacity_mb=256, publish_mb=80, ring_mb=32)
    pool = 3 * cluster.segment_mb << 20
    per_round = 16  # chunks a round
    rounds = (2 * pool) // (per_round * (4 << 20)) + 1
    for r in range(rounds):
        out = a.call("save_publish", seed=100 + r, chunks=per_round, timeout=120)
        assert out["flushed"], out
        assert all(p in (0, 1) for p in out["published"])
    st = a.call("stats")["remote"]
    assert st["publish_chunks"] + st["publish_dropped"] == rounds * per_round
    assert st["publish_chunks"] >= per_round  # the pool took some
    # the master evicted to make room
    summary = cluster.summary()
    evicted = re.search(r"\| Eviction: Success/Attempts=(\d+)/", summary)
    assert evicted and int(evicted.group(1)) > 0, summary
    # the newest chains are still served bit-exact; old ones miss, without errors
    b = nodes(1, geometry=big, nr_blocks=256, capacity_mb=64, ring_mb=32)
    newest = b.call("fetch", seed=100 + rounds - 1, chunks=4)
    assert all(s in (0, -2, -125) for s in newest["status"])
    assert all(e for e, s in zip(newest["exact"], newest["status"], strict=True) if s == 0)
    oldest = b.call("lookup", seed=100, chunks=per_round)
    assert 0 <= oldest["remote"] < per_round
    assert b.call("stats")["remote"]["up"] == 1


def test_client_killed_during_fetch_gives_load_errors_not_a_hang(nodes, cluster):
    big = dict(nr_layers=4, nr_kv_heads=8, head_dim=128, elem_bytes=2, kv_planes=2,
               block_tokens=16, chunk_tokens=256)
    a = nodes(0, geometry=big, nr_blocks=256, capacity_mb=256, publish_mb=80, ring_mb=32)
    for s in range(3):
        assert a.call("save_publish", seed=200 + s, chunks=8, timeout=120)["flushed"]
    b = nodes(1, geometry=big, nr_blocks=256, capacity_mb=64, ring_mb=64, timeout_ms=1500)
    results = []
    killed = False
    for i in range(12):
        if i == 2:
            for n in range(cluster.nr_nodes):  # every node holding data dies
                cluster.kill_node(n)
            killed = True
        got = b.call("fetch", seed=200 + i % 3, chunks=8, timeout=20)
        results.append((killed, got))
    for _, got in results:
        assert got["seconds"] < 1.5 + 1.0, got["seconds"]  # bounded by the timeout
        assert all(e for e, s in zip(got["exact"], got["status"], strict=True) if s == 0)
        assert all(u for u, s in zip(got["untouched"], got["status"], strict=True) if s != 0)
    assert all(g["loaded"] == 8 for k, g in results if not k), results
    after = [g for k, g in results if k]
    assert any(g["loaded"] < 8 for g in after)  # load errors, not stale or partial data
    st = b.call("stats")["remote"]
    assert st["fetch_errors"] > 0
    # local serving goes on
    assert b.call("save_publish", seed=300, chunks=2, flush=False)["saved"] == [0, 0]
    assert b.call("load_local", seed=300, chunks=2)["loaded"] == 2


def test_master_killed_lookups_miss_and_serving_goes_on(nodes, cluster):
    a = nodes(0, timeout_ms=500, lookup_timeout_ms=100, breaker_faults=2, breaker_open_ms=500)
    assert a.call("save_publish", seed=7, chunks=4)["flushed"]
    cluster.kill_master()
    t0 = time.monotonic()
    answers = [a.call("lookup", seed=8, chunks=4, first=0) for _ in range(5)]
    assert time.monotonic() - t0 < 5 * (0.1 + 0.4)
    assert all(x["remote"] < 0 for x in answers)  # misses (errors), never hits
    assert all(x["seconds"] < 0.1 + 0.2 for x in answers)  # the lookup budget, not Mooncake's
    st = a.call("stats")["remote"]
    assert st["up"] == 0 and st["breaker_trips"] >= 1
    # the local store serves on
    local = a.call("load_local", seed=7, chunks=4)
    assert local["loaded"] == 4 and all(local["exact"])
    out = a.call("save_publish", seed=9, chunks=2, flush_ms=3000)
    assert out["saved"] == [0, 0]


def test_publishing_is_paced_and_its_queue_bounded(nodes):
    # tiny records are 132 KiB; at 1 MB/s, 16 of them take at least the time of the 8 put after
    # the first batch (up to 8 a batch)
    rate = 1_000_000
    slow = nodes(0, publish_rate=rate, publish_mb=4)
    out = slow.call("save_publish", seed=20, chunks=16, timeout=60)
    assert out["flushed"] and out["published"] == [0] * 16
    record = slow.call("stats")["remote"]["publish_bytes"] // 16
    assert out["publish_seconds"] >= 0.9 * 8 * record / rate, out["publish_seconds"]
    fast = nodes(1)
    out = fast.call("save_publish", seed=21, chunks=16)
    assert out["publish_seconds"] < 8 * record / rate  # uncapped: much faster

    # a queue of 3 records, drained at 0.2 MB/s: publishing never waits. A record is queued (0),
    # the oldest queued one dropped to make room, or, while the publisher has every slot in a put
    # (it takes all that are queued at once), not queued (-ENOBUFS, as tutti/remote.h says);
    # either way it is counted. The first three always find a free slot.
    tight = nodes(2, publish_rate=200_000, publish_mb=0.4)
    out = tight.call("save_publish", seed=22, chunks=12, flush_ms=20000, timeout=60)
    assert out["published"][:3] == [0] * 3 and out["flushed"]
    assert all(x in (0, -errno.ENOBUFS) for x in out["published"]), out["published"]
    st = tight.call("stats")["remote"]
    assert st["publish_dropped"] > 0
    assert st["publish_chunks"] + st["publish_dropped"] == 12
