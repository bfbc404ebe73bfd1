# SPDX-License-Identifier: Apache-2.0
"""Open a store through the connector's acquire_store in a process where io_uring is refused
the way a container's default seccomp profile refuses it: a seccomp filter that fails
io_uring_setup, io_uring_enter and io_uring_register with an errno (x86-64 only).

Usage: no_io_uring.py DIR ERRNO ENGINE; prints one JSON line: the engine the store
reports for host KV, or the error."""

import ctypes
import dataclasses
import json
import sys

# struct seccomp_data: nr at offset 0, arch at 4; the io_uring syscalls are 425-427 on x86-64.
AUDIT_ARCH_X86_64 = 0xC000003E
IO_URING_SYSCALLS = (425, 426, 427)
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]


def refuse_io_uring(err):
    """Install the filter in this process (and its threads to come); irreversible."""
    lo, hi = min(IO_URING_SYSCALLS), max(IO_URING_SYSCALLS)
    prog = [
        (BPF_LD_W_ABS, 0, 0, 4),  # arch
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_LD_W_ABS, 0, 0, 0),  # nr
        (BPF_JGE_K, 0, 2, lo),  # nr >= lo, else allow
        (BPF_JGE_K, 1, 0, hi + 1),  # nr > hi: allow
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | err),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    filt = (SockFilter * len(prog))(*[SockFilter(*f) for f in prog])
    fprog = SockFprog(len(prog), filt)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def main(path, err, engine):
    refuse_io_uring(err)
    from tutti.serving.config import TuttiConfig
    from tutti.serving.stores import acquire_store, release_store
    from tutti.store import KV, Geometry

    geo = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=32, elem_bytes=4, block_tokens=16,
                   chunk_tokens=32)
    cfg = TuttiConfig.from_extra({"dirs": [path], "capacity_gb": 0.01}, 16)
    cfg = dataclasses.replace(cfg, engine=engine)
    try:
        key, store = acquire_store(cfg, [path], geo, b"no-io-uring")
    except OSError as e:
        print(json.dumps({"errno": e.errno, "error": str(e)}))
        return
    import numpy as np

    page = geo.layer_block_bytes
    layers = [np.zeros((8, page), dtype=np.uint8) for _ in range(geo.nr_layers)]
    kv = KV(geo, [(a.ctypes.data, page, page) for a in layers], 1, 8)
    print(json.dumps({"engine": store.engine_for(kv)}))
    kv.close()
    release_store(key)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
