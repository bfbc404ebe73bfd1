# SPDX-License-Identifier: Apache-2.0
"""Store.close() while other threads are inside calls: the Store class is thread-safe, so close
waits for the calls in flight, later calls raise OSError(EBADF), and nothing crashes. Each
scenario runs in a child interpreter, so that a use after free shows as that child's crash
rather than taking the test run down."""

import os
import subprocess
import sys
import textwrap

import pytest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = textwrap.dedent("""
    import errno, sys, threading, time
    import numpy as np
    from tutti.store import KV, ChunkRequest, Geometry, Store

    GEO = Geometry(nr_layers=8, nr_kv_heads=2, head_dim=64, elem_bytes=4, block_tokens=16,
                   chunk_tokens=64)
    NR_BLOCKS = 256
    BPC = 4

    def host_kv(seed):
        rng = np.random.default_rng(seed)
        page = GEO.layer_block_bytes
        layers = [rng.integers(0, 256, size=(NR_BLOCKS, page), dtype=np.uint8)
                  for _ in range(GEO.nr_layers)]
        return layers, KV(GEO, [(a.ctypes.data, page, page) for a in layers], 1, NR_BLOCKS)

    def chain(i, n):
        return [bytes([i % 256, k]) * 16 for k in range(n)]

    def hammer(call, errors, started):
        # Calls until one raises EBADF (the store is closed); anything else is a failure.
        started.set()
        while True:
            try:
                call()
            except OSError as e:
                if e.errno != errno.EBADF:
                    errors.append(repr(e))
                return
""")


def run_child(body, tmp_path):
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, (
        f"child exited {proc.returncode} (negative: killed by that signal)\n"
        f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}")
    return proc.stdout


@pytest.mark.parametrize("engine", ["uring", "posix"])
def test_close_while_other_threads_load_and_save_waits_for_them(engine, tmp_path):
    out = run_child(f"""
        src, src_kv = host_kv(1)
        dst, dst_kv = host_kv(2)
        for rnd in range(8):
            st = Store([sys.argv[1] + f"/s{{rnd}}"], GEO, capacity_bytes=256 * GEO.slot_bytes,
                       engine="{engine}", queue_depth=8)
            st.save(src_kv, [ChunkRequest(chain(c, 8), list(range(8 * BPC)))
                             for c in range(6)])
            errors, threads = [], []
            calls = [
                lambda: st.load(dst_kv, [ChunkRequest(chain(c, 8),
                                                      list(range(8 * BPC, 16 * BPC)))
                                         for c in range(6)]),
                lambda: st.save(src_kv, [ChunkRequest(chain(100 + c, 8),
                                                      list(range(8 * BPC)))
                                         for c in range(6)]),
                lambda: st.lookup(chain(3, 8)),
                lambda: st.stats(),
                lambda: st.keys(),
            ]
            for call in calls:
                started = threading.Event()
                t = threading.Thread(target=hammer, args=(call, errors, started))
                t.start()
                started.wait()
                threads.append(t)
            time.sleep(0.02 * (rnd % 4))
            st.close()
            for t in threads:
                t.join(60)
                assert not t.is_alive(), "a caller never returned"
            assert not errors, errors
            try:
                st.lookup(chain(3, 8))
                raise AssertionError("a call after close() succeeded")
            except OSError as e:
                assert e.errno == errno.EBADF, e
            st.close()  # a second close is harmless
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"


def test_closing_a_kv_while_a_load_uses_it_waits(tmp_path):
    out = run_child("""
        src, src_kv = host_kv(1)
        with Store([sys.argv[1] + "/s"], GEO, capacity_bytes=256 * GEO.slot_bytes) as st:
            st.save(src_kv, [ChunkRequest(chain(c, 8), list(range(8 * BPC))) for c in range(6)])
            for rnd in range(8):
                dst, dst_kv = host_kv(2)
                errors = []
                started = threading.Event()
                call = lambda: st.load(dst_kv, [ChunkRequest(chain(c, 8),
                                                             list(range(8 * BPC)))
                                                for c in range(6)])
                t = threading.Thread(target=hammer, args=(call, errors, started))
                t.start()
                started.wait()
                time.sleep(0.01 * (rnd % 3))
                dst_kv.close()
                t.join(60)
                assert not t.is_alive() and not errors, errors
            # The store itself is still open and fine.
            assert st.lookup(chain(3, 8)) == (8, 8 * BPC)
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"


def test_closing_a_store_closes_its_pipelines_first(tmp_path):
    out = run_child("""
        from tutti.pipeline import Pipeline
        src, src_kv = host_kv(1)
        st = Store([sys.argv[1] + "/s"], GEO, capacity_bytes=256 * GEO.slot_bytes)
        p = Pipeline(st, src_kv)
        st.close()
        try:
            p.stats()
            raise AssertionError("the pipeline outlived its store")
        except OSError as e:
            assert e.errno == errno.EBADF, e
        print("ok")
    """, tmp_path)
    assert out.strip() == "ok"
