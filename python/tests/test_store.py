# SPDX-License-Identifier: Apache-2.0
"""The ctypes binding against the real library: round trips, errors as OSError, statistics."""

import errno
import os

import numpy as np
import pytest

from tutti.store import KV, ChunkRequest, Geometry, Store

GEO = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=32, elem_bytes=4, block_tokens=16,
               chunk_tokens=32)
NR_BLOCKS = 32


def host_kv(geo, nr_blocks, seed):
    """Per layer one (nr_blocks, page) array, as vLLM's packed per-layer layout is."""
    rng = np.random.default_rng(seed)
    page = geo.layer_block_bytes
    layers = [rng.integers(0, 256, size=(nr_blocks, page), dtype=np.uint8)
              for _ in range(geo.nr_layers)]
    segs = [(a.ctypes.data, page, page) for a in layers]
    return layers, KV(geo, segs, 1, nr_blocks)


def keys(n, salt=b""):
    return [bytes([i]) * 16 + salt.ljust(16, b"\0") for i in range(n)]


@pytest.fixture
def store(tmp_path):
    with Store([tmp_path / "s"], GEO, capacity_bytes=64 * GEO.slot_bytes) as st:
        yield st


def test_save_then_load_moves_every_block_bit_for_bit(store):
    src, src_kv = host_kv(GEO, NR_BLOCKS, 1)
    dst, dst_kv = host_kv(GEO, NR_BLOCKS, 2)
    ks = keys(4)
    src_ids = [5, 9, 1, 30, 2, 7, 11, 12]
    dst_ids = [0, 3, 4, 6, 8, 10, 13, 14]
    n, status = store.save(src_kv, [ChunkRequest(ks, src_ids)])
    assert (n, status) == (4, [0, 0, 0, 0])
    assert store.lookup(ks) == (4, 8)
    n, status = store.load(dst_kv, [ChunkRequest(ks, dst_ids)])
    assert (n, status) == (4, [0, 0, 0, 0])
    for layer in range(GEO.nr_layers):
        assert np.array_equal(dst[layer][dst_ids], src[layer][src_ids])
    # From the middle of chunk 1, skipping its first block.
    dst2, dst2_kv = host_kv(GEO, NR_BLOCKS, 3)
    n, _ = store.load(dst2_kv, [ChunkRequest(ks, [20, 21, 22, 23, 24], first_chunk=1,
                                             skip_blocks=1)])
    assert n == 3
    for layer in range(GEO.nr_layers):
        assert np.array_equal(dst2[layer][[20, 21, 22, 23, 24]], src[layer][src_ids[3:]])
    st = store.stats()
    assert st["save_chunks"] == 4 and st["load_chunks"] == 7 and st["used_slots"] == 4


def test_keys_lists_every_stored_chunk_with_its_blocks_across_batches(store):
    assert store.keys() == {}
    _, kv = host_kv(GEO, NR_BLOCKS, 1)
    a, b = keys(3), keys(2, salt=b"b")
    store.save(kv, [ChunkRequest(a, list(range(5)))])  # the last chunk holds one block
    store.save(kv, [ChunkRequest(b, list(range(4)))])
    want = {a[0]: 2, a[1]: 2, a[2]: 1, b[0]: 2, b[1]: 2}
    assert store.keys() == want
    assert store.keys(batch=2) == want
    assert store.keys(batch=1) == want


def test_missing_chunks_are_per_chunk_errors_not_exceptions(store):
    _, kv = host_kv(GEO, NR_BLOCKS, 1)
    n, status = store.load(kv, [ChunkRequest(keys(2), [0, 1, 2, 3])])
    assert n == 0 and status == [-errno.ENOENT, -errno.ENOENT]
    assert store.lookup(keys(2)) == (0, 0)


def test_bad_arguments_raise_oserror_with_the_errno(store, tmp_path):
    _, kv = host_kv(GEO, NR_BLOCKS, 1)
    with pytest.raises(OSError) as e:
        store.save(kv, [ChunkRequest(keys(1), [NR_BLOCKS])])  # block id out of range
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        store.save(kv, [ChunkRequest([b"short"], [0, 1])])
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        Store([tmp_path / "none"], GEO, capacity_bytes=GEO.slot_bytes, create=False)
    assert e.value.errno == errno.ENOENT
    with pytest.raises(OSError) as e:
        Geometry(nr_layers=2, nr_kv_heads=2, head_dim=32, block_tokens=16, chunk_tokens=24).c()
    assert e.value.errno == errno.EINVAL


def test_a_second_open_is_ebusy_and_a_reopen_finds_the_chunks(tmp_path):
    src, src_kv = host_kv(GEO, NR_BLOCKS, 1)
    d = tmp_path / "s"
    st = Store([d], GEO, capacity_bytes=16 * GEO.slot_bytes, ns=b"model-a")
    st.save(src_kv, [ChunkRequest(keys(2), [1, 2, 3, 4])])
    with pytest.raises(OSError) as e:
        Store([d], GEO, capacity_bytes=16 * GEO.slot_bytes, ns=b"model-a")
    assert e.value.errno == errno.EBUSY
    st.close()
    with Store([d], GEO, capacity_bytes=16 * GEO.slot_bytes, ns=b"model-a") as again:
        assert again.lookup(keys(2)) == (2, 4)
        assert again.stats()["recovered_chunks"] == 2
    with pytest.raises(OSError) as e:
        Store([d], GEO, capacity_bytes=16 * GEO.slot_bytes, ns=b"model-b")
    assert e.value.errno == errno.EEXIST


def test_data_files_spread_a_directory_s_chunks_and_a_missing_one_is_enoent(tmp_path):
    src, src_kv = host_kv(GEO, NR_BLOCKS, 1)
    dst, dst_kv = host_kv(GEO, NR_BLOCKS, 2)
    d = tmp_path / "s"
    with Store([d], GEO, capacity_bytes=64 * GEO.slot_bytes, data_files=0) as st:
        st.save(src_kv, [ChunkRequest(keys(4), list(range(8)))])
    # The library's default: 16 files, the store's 4 chunks in the first 4 of them.
    names = ["tutti.data"] + [f"tutti.data.{k}" for k in range(1, 16)]
    assert sorted(p.name for p in d.iterdir()) == sorted(names)
    with Store([d], GEO, capacity_bytes=64 * GEO.slot_bytes) as st:
        assert st.load(dst_kv, [ChunkRequest(keys(4), list(range(8)))]) == (4, [0, 0, 0, 0])
    for layer in range(GEO.nr_layers):
        assert np.array_equal(dst[layer][:8], src[layer][:8])
    (d / "tutti.data.3").unlink()
    with pytest.raises(OSError) as e:
        Store([d], GEO, capacity_bytes=64 * GEO.slot_bytes)
    assert e.value.errno == errno.ENOENT and "tutti.data.3 is missing" in str(e.value)
    with pytest.raises(OSError) as e:
        Store([tmp_path / "t"], GEO, capacity_bytes=64 * GEO.slot_bytes, data_files=17)
    assert e.value.errno == errno.EINVAL


def test_auto_moves_host_kv_through_the_cpu_engine_and_says_so(tmp_path, caplog):
    src, src_kv = host_kv(GEO, NR_BLOCKS, 1)
    dst, dst_kv = host_kv(GEO, NR_BLOCKS, 2)
    ks = keys(2)
    with Store([tmp_path / "s"], GEO, capacity_bytes=16 * GEO.slot_bytes, engine="auto") as st:
        assert st.engine_for(src_kv) in ("uring", "posix")  # posix where io_uring is refused
        assert st.save(src_kv, [ChunkRequest(ks, [1, 2, 3, 4])]) == (2, [0, 0])
        assert st.load(dst_kv, [ChunkRequest(ks, [5, 6, 7, 8])]) == (2, [0, 0])
        for layer in range(GEO.nr_layers):
            assert np.array_equal(dst[layer][[5, 6, 7, 8]], src[layer][[1, 2, 3, 4]])
        stats = st.stats()
        assert stats["gpu_io_kernel_ns"] == 0
        # Host KV goes through the lanes: no wave (GPU KV's way) was waited for. The fields sit
        # at the end of the library's struct, so reading them checks the binding's layout.
        assert stats["wave_io_wait_ns"] == 0 and stats["wave_copy_wait_ns"] == 0
        assert stats["load_ns"] > 0 and stats["save_ns"] > 0
    # Host KV never tries gpu-uring, so there is no fallback to warn about.
    assert not [r for r in caplog.records if "gpu-uring" in r.getMessage()]


def test_unknown_engine_and_issuer_are_refused_naming_the_library_s_choices(tmp_path):
    import tutti._lib as lib
    from tutti.store import engines

    # The engines and their options come from the library's own list, in enum order.
    assert lib.engines() == {"uring": 0, "posix": 1, "gpu-uring": 2, "gds": 3, "auto": 4}
    listed = engines()
    gu = {o.name: o for o in listed["gpu-uring"].options}
    assert gu["submit"].choices == ("auto", "sqpoll", "host") and gu["submit"].default == "auto"
    assert gu["copy"].choices == ("auto", "sm", "dma") and gu["copy"].default == "auto"
    assert (gu["workers"].min, gu["workers"].max, gu["workers"].default) == (1, 64, 29)
    assert [o.name for o in listed["auto"].options] == ["workers", "sms", "submit", "copy",
                                                         "threads"]
    assert listed["uring"].options == () and listed["posix"].options[0].name == "threads"
    assert all(e.description for e in listed.values())
    with pytest.raises(OSError) as e:
        Store([tmp_path / "s"], GEO, capacity_bytes=16 * GEO.slot_bytes, engine="io_uring")
    assert e.value.errno == errno.EINVAL
    assert "(one of uring, posix, gpu-uring, gds, auto)" in str(e.value)
    # An engine checks its own options, and the exception carries its reason.
    for engine, opts, named in (
            ("gpu-uring", "submit=SQPOLL", "engine gpu-uring: submit=SQPOLL is not one of auto, "
                                           "sqpoll, host"),
            ("gpu-uring", {"copy": "copy-engine"}, "engine gpu-uring: copy=copy-engine is not "
                                                   "one of auto, sm, dma"),
            ("posix", {"workers": 4}, "engine posix: unknown option 'workers'"),
            ("auto", "threads=4097", "engine auto: threads=4097 is out of its range 0..4096")):
        with pytest.raises(OSError) as e:
            Store([tmp_path / "s"], GEO, capacity_bytes=16 * GEO.slot_bytes, engine=engine,
                  engine_opts=opts)
        assert e.value.errno == errno.EINVAL and named in str(e.value), str(e.value)
    for bad in ({"threads": True}, {"threads": "1,workers=2"}, {"a=b": 1}):
        with pytest.raises(OSError) as e:
            Store([tmp_path / "s"], GEO, capacity_bytes=16 * GEO.slot_bytes, engine="posix",
                  engine_opts=bad)
        assert e.value.errno == errno.EINVAL
    assert not (tmp_path / "s").exists()  # refused before anything was made
    with Store([tmp_path / "s"], GEO, capacity_bytes=16 * GEO.slot_bytes, engine="posix",
               engine_opts={"threads": 2}) as st:
        assert st.engine_for(host_kv(GEO, NR_BLOCKS, 1)[1]) == "posix"


def test_library_not_found_says_how_to_fix_it(monkeypatch, tmp_path):
    import tutti._lib as lib

    monkeypatch.setattr(lib, "_lib", None)
    monkeypatch.setenv("TUTTI_LIBRARY", str(tmp_path / "nothing.so"))
    with pytest.raises(OSError) as e:
        lib.lib()
    assert e.value.errno == errno.ENOENT and "TUTTI_LIBRARY" in str(e.value)
    assert os.environ["TUTTI_LIBRARY"].endswith("nothing.so")
