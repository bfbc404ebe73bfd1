# SPDX-License-Identifier: Apache-2.0
"""The layerwise pipeline through the binding, in CPU mode (host KV, the same scheduler as on a
GPU): a step that loads a cached prefix and saves what it computes; the writes come after the
reads (slack), the timeline says so, and everything reads back bit for bit."""

import json

import numpy as np
import pytest

from tutti.pipeline import Pipeline, Profile
from tutti.store import ChunkRequest, Geometry, Store

from test_store import host_kv, keys

GEO = Geometry(nr_layers=4, nr_kv_heads=2, head_dim=64, elem_bytes=2, block_tokens=16,
               chunk_tokens=64)
NR_BLOCKS = 64


@pytest.fixture
def store(tmp_path):
    with Store([tmp_path / "s"], GEO, capacity_bytes=64 * GEO.slot_bytes) as st:
        yield st


def run_step(pipe, loads, saves, tokens):
    sid = pipe.begin_step(loads=loads, saves=saves, compute_tokens=tokens)
    for layer in range(GEO.nr_layers):
        pipe.wait_layer(layer)
        pipe.save_layer(layer)
    pipe.end_step()
    for _ in range(5000):
        res = pipe.result(sid)
        if res is not None:
            return res
        import time
        time.sleep(0.001)
    raise AssertionError("step never final")


def test_step_loads_prefix_and_saves_suffix_in_slack(store, tmp_path):
    src, src_kv = host_kv(GEO, NR_BLOCKS, 1)
    dst, dst_kv = host_kv(GEO, NR_BLOCKS, 2)
    ks = keys(6, b"pipe")
    pre_ids = list(range(0, 12))  # chunks 0..2, 4 blocks each
    assert store.save(src_kv, [ChunkRequest(ks[:3], pre_ids)])[0] == 3
    load_ids = list(range(20, 32))
    new_ids = list(range(40, 50))  # chunks 3..5, the last one partial (2 blocks)
    for layer in range(GEO.nr_layers):
        dst[layer][new_ids] = src[layer][new_ids]
    with Pipeline(store, dst_kv, save_staging_bytes=64 << 20) as pipe:
        res = run_step(pipe, [ChunkRequest(ks[:3], load_ids)],
                       [ChunkRequest(ks, new_ids, first_chunk=3)], tokens=160)
        assert res["load_chunks"] == 3 and res["load_errors"] == 0
        assert res["status"] == [0, 0, 0]
        assert res["saves_staged"] == 3 and res["saves_skipped"] == 0
        assert len(res["layer_stall_ns"]) == GEO.nr_layers
        for layer in range(GEO.nr_layers):
            assert np.array_equal(dst[layer][load_ids], src[layer][pre_ids])
        pipe.flush()
        st = pipe.stats()
        assert st["saves_written"] == 3 and st["save_errors"] == 0
        assert st["steps"] == 1 and st["layers_loaded"] == GEO.nr_layers
        assert st["staging_bytes"] >= 3 * GEO.nr_layers * GEO.layer_block_bytes * 4
        pipe.write_trace(tmp_path / "trace.json")
        prof = pipe.profile()
        assert prof.read_bytes_per_s > 0 and prof.write_bytes_per_s > 0
    assert store.lookup(ks) == (6, 22)
    # Reads first: every write starts after the step's last read ended.
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    reads = [e for e in events if e.get("ph") == "X" and e["name"].startswith("read ")]
    writes = [e for e in events if e.get("ph") == "X" and e["name"].startswith("write ")]
    assert len(reads) == GEO.nr_layers and writes
    assert min(w["ts"] for w in writes) >= max(r["ts"] + r["dur"] for r in reads)
    # What was saved reads back bit for bit.
    back, back_kv = host_kv(GEO, NR_BLOCKS, 3)
    ids = list(range(22))
    n, status = store.load(back_kv, [ChunkRequest(ks, ids)])
    assert n == 6
    for layer in range(GEO.nr_layers):
        assert np.array_equal(back[layer][ids], src[layer][pre_ids + new_ids])


def test_profile_file_round_trip_and_errors(tmp_path):
    p = Profile(4, 2.5e10, 1.0e10, [10.0, 11.0, 12.0, 13.5])
    p.write(tmp_path / "prof")
    q = Profile.read(tmp_path / "prof", 4)
    assert (q.read_bytes_per_s, q.write_bytes_per_s) == (2.5e10, 1.0e10)
    assert q.layer_ns_per_token == [10.0, 11.0, 12.0, 13.5]
    with pytest.raises(OSError):
        Profile.read(tmp_path / "prof", 2)  # layers beyond the model
    with pytest.raises(OSError):
        Profile.read(tmp_path / "missing", 4)


def test_bad_calls_raise(store):
    _, kv = host_kv(GEO, NR_BLOCKS, 4)
    with Pipeline(store, kv) as pipe:
        with pytest.raises(OSError):
            pipe.wait_layer(0)  # no step
        pipe.begin_step()
        with pytest.raises(OSError):
            pipe.wait_layer(2)  # out of order
        with pytest.raises(OSError):
            pipe.end_step()  # layers not waited for
