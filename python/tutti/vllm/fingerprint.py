# SPDX-License-Identifier: Apache-2.0
"""What a model's weights are, cheaply, for the store's namespace: KV computed with other
weights must never be served, so changed weights make a new namespace.

The weights are found where vLLM loads them from: the model's directory, or the Hugging Face
cache's snapshot of a hub model (its folder is named by the checkpoint's commit). The
fingerprint covers every weight file's name and size, the whole of the small files that shape
the KV (``config.json``, the weight index), and a few bytes of every tensor: a safetensors
file's header (names, dtypes, shapes, offsets) and three 64-byte windows of each tensor's data
(its start, middle and end); a file of another format, 16 windows of 4 KiB spread over it. A
fine-tuned or re-trained checkpoint changes every window of the tensors it touches, so it
changes the fingerprint, while reading about 200 bytes per tensor costs milliseconds for a
model whose weights vLLM has just read (they sit in the page cache)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
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


def fingerprint_dir(path: Path, weights: bool = True) -> str:
    """The fingerprint of the weights in ``path`` (32 hex digits); every weight file below it,
    in name order, hidden folders excluded (``weights`` False: the small files only)."""
    h = hashlib.blake2b(digest_size=16)
    files: list[Path] = []
    for root, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if (weights and name.endswith(WEIGHT_SUFFIXES)) or name in SMALL_FILES or \
                    name.endswith(".index.json"):
                files.append(Path(root) / name)
    for f in sorted(files):
        rel = f.relative_to(path).as_posix()
        with open(f, "rb") as fh:
            fd = fh.fileno()
            size = os.fstat(fd).st_size
            h.update(f"{rel}\0{size}\0".encode())
            if not rel.endswith(WEIGHT_SUFFIXES):
                h.update(fh.read())
            elif not (rel.endswith(".safetensors") and _hash_safetensors(fd, size, h)):
                _hash_other(fd, size, h)
    return h.hexdigest()


def weights_fingerprint(model: str, revision: str | None, load_format: str,
                        download_dir: str | None) -> str | None:
    """The fingerprint of the weights' folder, or None when vLLM loads them from no folder here.
    vLLM's random weights (``load_format`` dummy, drawn from a fixed seed) depend on the model's
    configuration only: ``dummy-`` and the fingerprint of its small files."""
    path = weights_dir(model, revision, download_dir)
    if load_format == "dummy":
        return "dummy" if path is None else "dummy-" + fingerprint_dir(path, weights=False)
    if path is None:
        return None
    return fingerprint_dir(path)


def overrides_digest(overrides: Any) -> str:
    """A stable digest of vLLM's ``hf_overrides`` (a dict, or a function: its name)."""

    def name_of(obj: Callable[..., Any] | Any) -> str:
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj))}"

    text = json.dumps(overrides, sort_keys=True, default=name_of)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
