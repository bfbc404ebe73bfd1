# SPDX-License-Identifier: Apache-2.0
"""A store directory's data files as docs/format.md lays them out, for tests that read or
damage a store behind its back: `tutti.data` (file 0) and `tutti.data.1` .. `tutti.data.<n-1>`,
the directory's slot l being row l // n of file l % n."""

import struct
from pathlib import Path

SLOT_HEADER_BYTES = 4096


def file_path(store_dir, index):
    """Data file ``index`` of the directory."""
    return Path(store_dir) / ("tutti.data" if index == 0 else f"tutti.data.{index}")


def layout(store_dir):
    """What the superblock of the directory's ``tutti.data`` says: nr_layers, slot_bytes,
    data_off, nr_slots (of the directory), nr_files, and object_bytes."""
    with open(file_path(store_dir, 0), "rb") as f:
        sb = f.read(4096)
    nr_layers = struct.unpack_from("<I", sb, 16)[0]
    slot_bytes, data_off, nr_slots = struct.unpack_from("<QQQ", sb, 64)
    nr_files = struct.unpack_from("<I", sb, 116)[0]
    return {"nr_layers": nr_layers, "slot_bytes": slot_bytes, "data_off": data_off,
            "nr_slots": nr_slots, "nr_files": nr_files,
            "object_bytes": (slot_bytes - SLOT_HEADER_BYTES) // nr_layers}


def slot_location(store_dir, lay, slot):
    """(file, offset) of the directory's slot ``slot`` (its header's first byte)."""
    n = lay["nr_files"]
    return file_path(store_dir, slot % n), lay["data_off"] + (slot // n) * lay["slot_bytes"]


def flip_byte(path, offset, mask=0xFF):
    """XOR the byte at ``offset`` of ``path`` with ``mask``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))
