# SPDX-License-Identifier: Apache-2.0
"""The weights' fingerprint (tutti/serving/fingerprint.py): an edit anywhere in a weight file is
a new fingerprint, whatever the windows the sampled mode reads; the cache of digests makes a
restart cost a stat per file and never hides an edit, damaged or not; the result does not
depend on the thread count; the connector's "fingerprint" key."""

import json
import os
import random
import shutil
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

from tutti.serving import fingerprint as fp
from tutti.serving.fingerprint import fingerprint_dir, weights_fingerprint

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def tensor_span(path, name):
    """[begin, end) of tensor ``name``'s data in safetensors file ``path``."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    begin, end = header[name]["data_offsets"]
    return 8 + n + begin, 8 + n + end


def rewrite_in_place(path, off, data, keep_times=True):
    """Overwrite ``data`` at ``off`` without changing the file's size, inode or (with
    ``keep_times``) its access and modification times, as an edit that hides would."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(data)
    if keep_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size) == (st.st_ino, st.st_size)


def write_safetensors(path, tensors):
    """A safetensors file of raw byte tensors {name: bytes} (dtype U8)."""
    header, off = {}, 0
    for name, data in tensors.items():
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [off,
                                                                                off + len(data)]}
        off += len(data)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for data in tensors.values():
            f.write(data)


def small_model(path, seed=0, files=2, tensor_bytes=300_000):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "seed": seed}))
    for i in range(files):
        rnd = random.Random(seed * 100 + i)
        write_safetensors(path / f"model-{i:05d}-of-{files:05d}.safetensors",
                          {f"layer.{j}.weight": rnd.randbytes(tensor_bytes) for j in range(3)})
    return path


@pytest.fixture
def hashed(monkeypatch):
    """Counts the bytes the full fingerprint reads from weight files."""
    seen = {"bytes": 0}
    real = fp._hash_files

    def counting(fds, sizes, threads):
        seen["bytes"] += sum(sizes)
        return real(fds, sizes, threads)

    monkeypatch.setattr(fp, "_hash_files", counting)
    return seen


def settle(monkeypatch):
    """Files written by the test count as settled after 0.2 s (instead of RACY_NS), so that the
    cache keeps their digests."""
    monkeypatch.setattr(fp, "RACY_NS", 100_000_000)
    time.sleep(0.2)


# ---- every byte counts ----


def edit_between_windows(model):
    """Rewrite 4 KiB inside layer 0's k_proj weights, between the windows that the sampled
    fingerprint reads, in place and with the file's times put back; returns an undo."""
    weights = model / "model.safetensors"
    begin, end = tensor_span(weights, "model.layers.0.self_attn.k_proj.weight")
    assert end - begin >= 16384
    off = begin + (end - begin) // 4  # past the first window, before the middle one
    assert all(off + 4096 <= w or w + fp.WINDOW_BYTES <= off for w in fp._windows(begin, end))
    with open(weights, "rb") as f:
        f.seek(off)
        old = f.read(4096)
    rewrite_in_place(weights, off, bytes(b ^ 0x5A for b in old))
    return lambda: rewrite_in_place(weights, off, old)


def test_an_edit_inside_a_tensor_away_from_the_sampled_windows_changes_the_fingerprint(
        tmp_path):
    """Issue 48, item 4: 4 KiB rewritten inside one layer's k/v weights, away from the windows
    that the sampled fingerprint reads, gave the old store's KV for the new weights."""
    pytest.importorskip("transformers")
    import tiny_llama

    model = tiny_llama.make(tmp_path / "m", seed=0)
    first = weights_fingerprint(str(model), None, "auto", None)
    undo = edit_between_windows(model)
    assert weights_fingerprint(str(model), None, "auto", None) != first
    # Put back, the fingerprint is the first again: it follows the bytes.
    undo()
    assert weights_fingerprint(str(model), None, "auto", None) == first


def test_the_sampled_mode_misses_an_edit_between_its_windows(tmp_path):
    """The limit that docs/vllm.md states for "fingerprint": "sampled"."""
    pytest.importorskip("transformers")
    import tiny_llama

    model = tiny_llama.make(tmp_path / "m", seed=0)
    sampled = weights_fingerprint(str(model), None, "auto", None, mode="sampled")
    edit_between_windows(model)
    assert weights_fingerprint(str(model), None, "auto", None, mode="sampled") == sampled


def test_one_byte_anywhere_in_any_weight_file_changes_the_fingerprint(tmp_path):
    model = small_model(tmp_path / "m", files=2)
    first = fingerprint_dir(model)
    names = sorted(p.name for p in model.glob("*.safetensors"))
    for name in names:
        path = model / name
        size = path.stat().st_size
        for off in (0, 8, size // 3, size // 2 + 7, size - 1):
            with open(path, "rb") as f:
                f.seek(off)
                old = f.read(1)
            rewrite_in_place(path, off, bytes([old[0] ^ 1]))
            assert fingerprint_dir(model) != first, (name, off)
            rewrite_in_place(path, off, old)
    assert fingerprint_dir(model) == first
    # The full and the sampled fingerprints of the same files differ: switching the mode is a
    # new namespace, never a mix.
    assert fingerprint_dir(model, mode="sampled") != first
    with pytest.raises(ValueError, match="must be one of full, sampled, not 'fast'"):
        fingerprint_dir(model, mode="fast")


def test_the_fingerprint_does_not_depend_on_the_thread_count(tmp_path, monkeypatch):
    monkeypatch.setattr(fp, "PIECE_BYTES", 64 << 10)  # many pieces per file
    monkeypatch.setattr(fp, "READ_BYTES", 8 << 10)
    model = small_model(tmp_path / "m", files=3)
    (model / "empty.bin").write_bytes(b"")  # no piece at all
    results = {fingerprint_dir(model, threads=t) for t in (1, 2, 3, 8)}
    assert len(results) == 1
    # The same bytes elsewhere give the same fingerprint: names are relative, digests are of
    # content only.
    shutil.copytree(model, tmp_path / "copy")
    assert fingerprint_dir(tmp_path / "copy", threads=2) in results


def test_the_dummy_weights_and_the_sampled_mode_are_unchanged(tmp_path):
    """vLLM's random weights keep their fingerprint of the small files, and the sampled mode
    its value, so that stores made with them keep their namespace."""
    import hashlib

    model = small_model(tmp_path / "m", files=1)
    h = hashlib.blake2b(digest_size=16)
    text = (model / "config.json").read_bytes()
    h.update(f"config.json\0{len(text)}\0".encode() + text)
    assert weights_fingerprint(str(model), None, "dummy", None) == "dummy-" + h.hexdigest()
    assert weights_fingerprint(str(model), None, "dummy", None, mode="sampled") == \
        "dummy-" + h.hexdigest()
    assert weights_fingerprint("no/such-model", None, "dummy", None) == "dummy"
    assert weights_fingerprint("no/such-model", None, "auto", None) is None


# ---- the cache of digests ----


def test_a_restart_reads_no_weights_and_an_edit_that_restores_mtime_is_seen(tmp_path, hashed,
                                                                             monkeypatch):
    model = small_model(tmp_path / "m", files=2)
    settle(monkeypatch)
    cache = tmp_path / "store"  # created when missing, as the store would be
    first = fingerprint_dir(model, cache_dir=cache)
    total = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    assert hashed["bytes"] == total
    assert (cache / fp.CACHE_NAME).is_file()
    assert fingerprint_dir(model, cache_dir=cache) == first
    assert hashed["bytes"] == total  # the restart: one fstat per file, no read
    # An edit in place that puts the mtime back changes the ctime: that file alone is hashed
    # again, and the fingerprint is new.
    path = model / "model-00001-of-00002.safetensors"
    size = path.stat().st_size
    rewrite_in_place(path, size // 2 + 1000, b"\xff" * 4096)
    second = fingerprint_dir(model, cache_dir=cache)
    assert hashed["bytes"] == total + size
    assert second != first and second == fingerprint_dir(model)


def test_a_file_changed_just_before_the_hash_is_not_cached(tmp_path, hashed):
    """Within RACY_NS of its last change a file's ctime may not move on a further change (the
    file system's timestamp granularity), so its digest is not kept."""
    model = small_model(tmp_path / "m", files=1)
    cache = tmp_path / "store"
    first = fingerprint_dir(model, cache_dir=cache)
    once = hashed["bytes"]
    assert fingerprint_dir(model, cache_dir=cache) == first
    assert hashed["bytes"] == 2 * once


@pytest.mark.parametrize("damage", ["digest", "identity", "check", "scheme", "truncated",
                                    "garbage", "not-a-list"])
def test_a_damaged_cache_is_never_trusted(tmp_path, hashed, monkeypatch, damage):
    model = small_model(tmp_path / "m", files=2)
    settle(monkeypatch)
    cache = tmp_path / "store"
    first = fingerprint_dir(model, cache_dir=cache)
    path = cache / fp.CACHE_NAME
    doc = json.loads(path.read_text())
    e = doc["files"][0]
    if damage == "digest":  # a digest changed, its entry's checksum kept
        e["digest"] = ("0" if e["digest"][0] != "0" else "1") + e["digest"][1:]
    elif damage == "identity":  # a whole entry, of the file as it was at another ctime
        e["ctime_ns"] += 1
        e["check"] = fp._entry_check(e)
    elif damage == "check":
        e["check"] = "00" * 16
    elif damage == "scheme":  # another piece size: its digests mean something else
        e["hash"] = "sha256/1024"
        e["check"] = fp._entry_check(e)
    text = json.dumps(doc)
    if damage == "truncated":
        text = text[: len(text) // 2]
    elif damage == "garbage":
        text = "\0\1\2 not json"
    elif damage == "not-a-list":
        text = json.dumps({"format": fp.CACHE_FORMAT, "files": {"a": 1}})
    path.write_text(text)
    before = hashed["bytes"]
    assert fingerprint_dir(model, cache_dir=cache) == first
    assert hashed["bytes"] > before  # recomputed, not taken from the damaged cache
    # And the cache is whole again.
    before = hashed["bytes"]
    assert fingerprint_dir(model, cache_dir=cache) == first
    assert hashed["bytes"] == before


def test_a_cache_that_cannot_be_used_is_ignored(tmp_path, monkeypatch):
    model = small_model(tmp_path / "m", files=1)
    settle(monkeypatch)
    first = fingerprint_dir(model)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert fingerprint_dir(model, cache_dir=not_a_dir) == first
    assert fingerprint_dir(model, cache_dir=not_a_dir / "below") == first
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / fp.CACHE_NAME).mkdir()  # a directory where the cache file would be
    assert fingerprint_dir(model, cache_dir=tmp_path / "d") == first


def test_processes_that_start_together_hash_once(tmp_path, hashed, monkeypatch):
    """Tensor-parallel ranks start at once: the first to lock the cache hashes, the others
    wait for its digests (each thread here opens and locks the file as a process would)."""
    model = small_model(tmp_path / "m", files=2)
    settle(monkeypatch)
    cache = tmp_path / "store"
    total = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    out = []
    ts = [threading.Thread(target=lambda: out.append(fingerprint_dir(model, cache_dir=cache)))
          for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == 4 and len(set(out)) == 1
    assert hashed["bytes"] == total
    assert [p.name for p in cache.iterdir()] == [fp.CACHE_NAME]  # no temporary file left


# ---- the connector's key ----


def test_the_connector_key_chooses_the_fingerprint_and_keeps_its_cache_in_the_store(tmp_path):
    pytest.importorskip("vllm")
    from tutti.serving.config import TuttiConfig

    import tiny_llama
    from vllm_configs import RIG_BS, rig_extra, rig_worker

    with pytest.raises(ValueError, match="\"fingerprint\" must be one of full, sampled, not "
                                         "'all'"):
        TuttiConfig.from_extra(rig_extra(tmp_path, fingerprint="all"), RIG_BS)
    assert TuttiConfig.from_extra(rig_extra(tmp_path), RIG_BS).fingerprint == "full"

    model = tiny_llama.make(tmp_path / "m", seed=0)
    w = rig_worker(model, rig_extra(tmp_path), register=False)
    assert w.ctx.weights == weights_fingerprint(str(model), None, "auto", None)
    assert (tmp_path / "s" / fp.CACHE_NAME).is_file()
    ns_full = w.ctx.ns
    w.shutdown()
    w = rig_worker(model, rig_extra(tmp_path, fingerprint="sampled"), register=False)
    assert w.ctx.weights == weights_fingerprint(str(model), None, "auto", None, mode="sampled")
    assert w.ctx.ns != ns_full
    w.shutdown()
