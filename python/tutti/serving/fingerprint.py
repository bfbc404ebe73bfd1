# SPDX-License-Identifier: Apache-2.0
"""What a model's weights are, for the store's namespace: KV computed with other weights must
never be served, so changed weights make a new namespace.

The weights are found where vLLM loads them from: the model's directory, or the Hugging Face
cache's snapshot of a hub model (its folder is named by the checkpoint's commit). The files
fingerprinted are every weight file below that folder (``WEIGHT_SUFFIXES``, hidden folders
excluded) and the small files that shape the KV (``config.json``, the weight index), which are
hashed whole. How much of a weight file counts is the connector's ``"fingerprint"`` key:

* ``"full"`` (the default): every byte of every weight file, with its relative name and size.
  Any change to any byte (short of a SHA-256 collision) is a new fingerprint, wherever it is.
* ``"sampled"``: a safetensors file's header (names, dtypes, shapes, offsets) and three 64-byte
  windows of each tensor's data (its start, middle and end); a file of another format, 16
  windows of 4 KiB spread over it. A fine-tune or a re-trained checkpoint changes every window
  of the tensors it touches, but an edit that misses every window (4 KiB rewritten in the
  middle of a tensor's half) is not seen, and the KV of the old weights is served for the new.

Why hashing every byte costs little at start-up:

* When. vLLM creates the connector after it has loaded the model: a worker in
  ``initialize_from_config`` (vllm/v1/worker/gpu_worker.py), after ``load_model`` and the memory
  profile that the KV-cache config passed to the connector comes from; the scheduler when the
  engine core builds it, after ``_initialize_kv_caches`` (vllm/v1/engine/core.py). The connector
  takes that KV-cache config in its constructor (connector.py), which every supported release
  (0.26, 0.32) passes, so it runs after the load in both. vLLM's safetensors loaders read
  through the page cache (``safe_open``'s mmap, or ``read()`` for the eager strategy), so the
  files were just read and usually sit in memory: the hash runs at CPU speed, not disk speed.
  Where they do not (weights larger than free memory, a loader that bypasses the page cache,
  weight files vLLM does not load, such as a second format beside the safetensors), the first
  start reads them from disk.
* How. Each file is cut into pieces of ``PIECE_BYTES``; threads (``threads``: the CPUs this
  process may run on, at most ``MAX_THREADS``) hash pieces in parallel, each read in
  ``READ_BYTES`` steps into a buffer of its own (``os.preadv`` and hashlib's update of large
  buffers both release the GIL). A file's digest is SHA-256 over its pieces' digests in order,
  so the result depends on the bytes alone, not on the number of threads. No mmap: a file
  truncated while mapped would kill the process with SIGBUS.
* Which hash. SHA-256: the fastest unbroken hash in hashlib on CPUs with SHA extensions (x86's
  SHA-NI, Arm's SHA2), over twice blake2b's rate per CPU second (WF1, docs/results.md); SHA-1
  is barely faster and broken. Non-cryptographic hashes (XXH3) are faster still but would need
  a dependency. The checkpoint's own hashes are no help: the Hugging Face cache names a blob by
  the SHA-256 it was downloaded with and never checks it again, so an edit in place keeps the
  name.
* Once. A file's digest is kept in a cache (``tutti.digests`` in the store's first directory,
  which lives as long as the store it protects), under the file's identity: device, inode,
  size, mtime and ctime in nanoseconds. The kernel sets ctime on every change of a file's
  content or metadata and user space cannot set it back, so an edit in place that restores the
  mtime still misses the cache. A restart therefore costs one ``fstat`` per file. The cache is
  never trusted blindly: an entry whose own checksum, hash scheme or identity does not match is
  ignored and the file hashed again; a cache that cannot be read, parsed or written is ignored
  (the fingerprint is computed, the start goes on). An entry is kept only when the file did not
  change while it was hashed and its ctime is more than ``RACY_NS`` older than the hash (a
  change within the file system's timestamp granularity after the hash could otherwise keep
  the ctime), and never for a file system that reports no times. Processes share it safely:
  the first to lock it hashes while the others wait, then they find its digests (tensor-
  parallel ranks start together); it is written whole to a temporary file and renamed over
  the old one, so a reader sees one or the other, and a torn file fails its checksums."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".msgpack", ".h5",
                   ".npz")
# Hashed whole: they shape the KV (architecture, RoPE, quantization) or map the weights.
SMALL_FILES = ("config.json", "params.json", "quantize_config.json", "hf_quant_config.json")
WINDOW_BYTES = 64  # per tensor, three windows of it
OTHER_WINDOWS = 16  # files that are not safetensors: windows of OTHER_WINDOW_BYTES
OTHER_WINDOW_BYTES = 4096
MAX_HEADER_BYTES = 100 << 20  # safetensors caps its header at 100 MB

FINGERPRINT_MODES = ("full", "sampled")  # the "fingerprint" key's choices
PIECE_BYTES = 64 << 20  # a unit of parallel work; part of what a file's digest means
READ_BYTES = 1 << 20  # one read; 256 KiB to 16 MiB cost the same CPU time (WF1)
MAX_THREADS = 16
PIECE_HASH = f"sha256/{PIECE_BYTES}"  # a cache entry's hash scheme
CACHE_NAME = "tutti.digests"
CACHE_FORMAT = "tutti-digests/1"
RACY_NS = 3_000_000_000  # 3 s: above the coarsest timestamp granularity of Linux file systems


def weights_dir(model: str, revision: str | None, download_dir: str | None) -> Path | None:
    """The local folder vLLM loads ``model``'s weights from, or None when it has none here (the
    weights come from elsewhere, e.g. a remote object store)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(repo_id=model, revision=revision, cache_dir=download_dir,
                                     local_files_only=True)
    except Exception:
        return None  # not a hub id, or not in the cache
    return Path(snapshot)


def _windows(begin: int, end: int) -> list[int]:
    """Offsets of the three windows of [begin, end): start, middle, end."""
    if end - begin <= WINDOW_BYTES:
        return [begin]
    mid = begin + (end - begin) // 2
    return [begin, mid, end - WINDOW_BYTES]


def _hash_safetensors(fd: int, size: int, h: Any) -> bool:
    """Header and per-tensor windows of a safetensors file; False if it is not one."""
    head = os.pread(fd, 8, 0)
    if len(head) != 8:
        return False
    (n,) = struct.unpack("<Q", head)
    if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
        return False
    header = os.pread(fd, n, 8)
    try:
        tensors = json.loads(header)
    except ValueError:
        return False
    if not isinstance(tensors, dict):
        return False
    h.update(header)
    base = 8 + n
    spans = sorted(tuple(t["data_offsets"]) for k, t in tensors.items()
                   if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t)
    for begin, end in spans:
        for off in _windows(base + int(begin), base + int(end)):
            h.update(os.pread(fd, min(WINDOW_BYTES, base + int(end) - off), off))
    return True


def _hash_other(fd: int, size: int, h: Any) -> None:
    step = max(size // OTHER_WINDOWS, 1)
    for off in range(0, size, step):
        h.update(os.pread(fd, OTHER_WINDOW_BYTES, off))


def _files(path: Path, weights: bool) -> list[Path]:
    files: list[Path] = []
    for root, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if (weights and name.endswith(WEIGHT_SUFFIXES)) or name in SMALL_FILES or \
                    name.endswith(".index.json"):
                files.append(Path(root) / name)
    return sorted(files)


def fingerprint_dir(path: Path, weights: bool = True, mode: str = "full",
                    cache_dir: str | os.PathLike[str] | None = None,
                    threads: int | None = None) -> str:
    """The fingerprint of the weights in ``path`` (32 hex digits); every weight file below it,
    in name order, hidden folders excluded (``weights`` False: the small files only, whatever
    the mode). ``mode`` "full": every byte of each weight file, its digest kept in
    ``cache_dir/tutti.digests`` where ``cache_dir`` is given (created if missing); "sampled":
    windows of each (the module's docstring says what each covers)."""
    if mode not in FINGERPRINT_MODES:
        raise ValueError(f"fingerprint mode must be one of {', '.join(FINGERPRINT_MODES)}, "
                         f"not {mode!r}")
    files = _files(path, weights)
    rels = [f.relative_to(path).as_posix() for f in files]
    full = weights and mode == "full"
    digests: dict[str, tuple[int, bytes]] = {}
    if full:
        big = [f for f, rel in zip(files, rels, strict=True) if rel.endswith(WEIGHT_SUFFIXES)]
        for f, d in zip(big, file_digests(big, cache_dir, threads), strict=True):
            digests[f.relative_to(path).as_posix()] = d
    h = hashlib.blake2b(digest_size=16)
    if full:
        h.update(b"full\0")  # never equal to a sampled fingerprint of the same files
    for f, rel in zip(files, rels, strict=True):
        if rel in digests:
            size, digest = digests[rel]
            h.update(f"{rel}\0{size}\0".encode() + digest)
            continue
        with open(f, "rb") as fh:
            fd = fh.fileno()
            size = os.fstat(fd).st_size
            h.update(f"{rel}\0{size}\0".encode())
            if not rel.endswith(WEIGHT_SUFFIXES):
                h.update(fh.read())
            elif not (rel.endswith(".safetensors") and _hash_safetensors(fd, size, h)):
                _hash_other(fd, size, h)
    return h.hexdigest()


# ---- every byte: digests of whole files, in parallel, kept in a cache ----


def _identity(st: os.stat_result) -> dict[str, int]:
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _entry_check(entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "check"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _read_entries(text: bytes) -> dict[tuple[int, int], dict[str, Any]]:
    """The cache's valid entries by (device, inode); whatever fails a check is left out."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or \
            not isinstance(doc.get("files"), list):
        return {}
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for e in doc["files"]:
        try:
            ok = e["hash"] == PIECE_HASH and e["check"] == _entry_check(e) and \
                len(bytes.fromhex(e["digest"])) == hashlib.sha256().digest_size
            if ok:
                out[(int(e["dev"]), int(e["ino"]))] = e
        except (TypeError, KeyError, ValueError, AttributeError):
            continue
    return out


def _cached(entries: dict[tuple[int, int], dict[str, Any]], ident: dict[str, int]) -> bytes | None:
    e = entries.get((ident["dev"], ident["ino"]))
    if e is None or any(e.get(k) != v for k, v in ident.items()):
        return None
    return bytes.fromhex(e["digest"])


@contextmanager
def _locked_cache(cache_dir: str | os.PathLike[str] | None) -> Iterator[tuple[int, Path,
                                                                            bool] | None]:
    """The cache file open and locked, its path, and whether this process may write it (an
    exclusive lock; a shared one where the file can only be read); None where there is no
    cache to use. A lock stays with the inode it was taken on, so one taken on a file renamed
    over since is dropped and taken again on the new file."""
    if cache_dir is None:
        yield None
        return
    path = Path(cache_dir) / CACHE_NAME
    fd, writable = -1, False
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        for _ in range(100):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                writable = True
            except PermissionError:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                writable = False
            fcntl.flock(fd, fcntl.LOCK_EX if writable else fcntl.LOCK_SH)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
            os.close(fd)
            fd = -1
    except OSError:
        if fd >= 0:
            os.close(fd)
        fd = -1
    if fd < 0:
        yield None
        return
    try:
        yield fd, path, writable
    finally:
        os.close(fd)  # drops the lock


def _write_cache(path: Path, entries: list[dict[str, Any]]) -> None:
    """Write the cache whole beside it and rename it over it; failures leave the old one."""
    doc = json.dumps({"format": CACHE_FORMAT, "files": entries}, indent=0)
    try:
        fd, tmp = tempfile.mkstemp(prefix=CACHE_NAME + ".", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as out:
            out.write(doc)
        os.replace(tmp, path)
    except OSError:
        with suppress(OSError):
            os.unlink(tmp)


def default_threads() -> int:
    """The CPUs this process may run on, at most ``MAX_THREADS``."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_THREADS))


def _hash_files(fds: list[int], sizes: list[int], threads: int) -> list[bytes]:
    """SHA-256 of each file: over its pieces' digests, in order."""
    pieces = [(i, off, min(PIECE_BYTES, size - off)) for i, size in enumerate(sizes)
              for off in range(0, size, PIECE_BYTES)]
    local = threading.local()

    def piece(task: tuple[int, int, int]) -> bytes:
        i, off, n = task
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(READ_BYTES)
        view = memoryview(buf)
        h = hashlib.sha256()
        end = off + n
        while off < end:
            got = os.preadv(fds[i], [view[:min(READ_BYTES, end - off)]], off)
            if got <= 0:
                break  # the file shrank: its identity changes, so nothing is cached
            h.update(view[:got])
            off += got
        return h.digest()

    if threads <= 1 or len(pieces) <= 1:
        done = [piece(t) for t in pieces]
    else:
        with ThreadPoolExecutor(max_workers=min(threads, len(pieces)),
                                thread_name_prefix="tutti-fingerprint") as pool:
            done = list(pool.map(piece, pieces))
    per_file: list[list[bytes]] = [[] for _ in sizes]
    for (i, _, _), d in zip(pieces, done, strict=True):
        per_file[i].append(d)
    return [hashlib.sha256(b"".join(p)).digest() for p in per_file]


def file_digests(files: list[Path], cache_dir: str | os.PathLike[str] | None = None,
                 threads: int | None = None) -> list[tuple[int, bytes]]:
    """The size and the digest of every byte of each file (SHA-256 over its pieces' SHA-256),
    the digest from the cache in ``cache_dir`` where an entry matches the file's identity,
    computed otherwise."""
    threads = default_threads() if threads is None else threads
    with _locked_cache(cache_dir) as cache:
        entries: dict[tuple[int, int], dict[str, Any]] = {}
        if cache is not None:
            with suppress(OSError):
                entries = _read_entries(os.pread(cache[0], os.fstat(cache[0]).st_size, 0))
        fds = [os.open(f, os.O_RDONLY | os.O_CLOEXEC) for f in files]
        try:
            before = [_identity(os.fstat(fd)) for fd in fds]
            found = [_cached(entries, ident) for ident in before]
            todo = [i for i, d in enumerate(found) if d is None]
            started = time.time_ns()
            for i, d in zip(todo, _hash_files([fds[i] for i in todo],
                                              [before[i]["size"] for i in todo], threads),
                            strict=True):
                after = _identity(os.fstat(fds[i]))
                found[i] = d
                keep = after == before[i] and 0 < after["ctime_ns"] < started - RACY_NS \
                    and after["mtime_ns"] > 0
                if keep:
                    e = dict(after, hash=PIECE_HASH, digest=d.hex())
                    entries[(after["dev"], after["ino"])] = dict(e, check=_entry_check(e))
        finally:
            for fd in fds:
                os.close(fd)
        if cache is not None and cache[2] and todo:
            mine = [entries[k] for k in dict.fromkeys((b["dev"], b["ino"]) for b in before)
                    if k in entries]
            _write_cache(cache[1], mine)
    return [(b["size"], d) for b, d in zip(before, found, strict=True) if d is not None]


def weights_fingerprint(model: str, revision: str | None, load_format: str,
                        download_dir: str | None, mode: str = "full",
                        cache_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The fingerprint of the weights' folder, or None when vLLM loads them from no folder here.
    vLLM's random weights (``load_format`` dummy, drawn from a fixed seed) depend on the model's
    configuration only: ``dummy-`` and the fingerprint of its small files. ``mode`` and
    ``cache_dir``: as ``fingerprint_dir``'s."""
    path = weights_dir(model, revision, download_dir)
    if load_format == "dummy":
        return "dummy" if path is None else "dummy-" + fingerprint_dir(path, weights=False)
    if path is None:
        return None
    return fingerprint_dir(path, mode=mode, cache_dir=cache_dir)


def overrides_digest(overrides: Any) -> str:
    """A stable digest of vLLM's ``hf_overrides`` (a dict, or a function: its name)."""

    def name_of(obj: Callable[..., Any] | Any) -> str:
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj))}"

    text = json.dumps(overrides, sort_keys=True, default=name_of)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
