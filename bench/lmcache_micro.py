# SPDX-License-Identifier: Apache-2.0
"""LMCache's store and retrieve of one request's KV, beside tutti-gpu-store-bench.

The same workload as bench/gpu_store_bench.c: Llama-3-8B geometry (32 layers, 8 KV heads, head
dim 128, bf16), blocks of 16 tokens, stored from one shuffled block table and retrieved into
another, poisoned before every retrieve and checked bit for bit after the last; 256-token
chunks; contexts 32K and 128K tokens.

The KV is what vLLM's GPU model runner hands a connector: one paged pool, allocated once and
registered once, each layer shaped and strided as the installed vLLM's attention backend says
(get_kv_cache_shape and get_kv_cache_stride_order, in the layout vLLM picks for LMCache's
connector: VLLM_KV_CACHE_LAYOUT, else NHD). With vLLM 0.26's FlashAttention that is a
(blocks, 8, 16, 2 x 128) view of memory laid out (blocks, 16, 8, 2 x 128): K and V of a head
side by side; older vLLM declared (2, blocks, 16, 8, 128). The pool holds the source and the
destination tables of the longest context and vLLM's null block 0, since LMCache's GPU
connector binds the first KV tensors it is given for good. Before the first store, LMCache's
own format detection must read that pool with this geometry, and every slot must lie inside
it: a wrong size stops the run with a message, not a kernel's illegal address.

LMCache runs its real in-process engine: LMCacheEngineBuilder with the GPU connector that
vLLM's integration creates (CreateGPUConnector with EngineType.VLLM and vLLM's layout hint),
and its local disk back end with O_DIRECT (extra_config use_odirect) in --dir, local_cpu off
so every retrieve reads the disk. The CPU buffer holds one request (LMCache allocates a
request's chunks before it writes them). A store is timed until every chunk is on the disk back
end (its writes are asynchronous); a retrieve until the KV is in GPU memory. Before each
retrieve the page cache is dropped (drop_caches, else posix_fadvise DONTNEED on LMCache's
files).

--gpu-connector picks the connector: v2, what vLLM's LMCacheConnectorV1 builds with LMCache's
defaults (VLLMPagedMemGPUConnectorV2); v3, the same with LMCache's config key
use_gpu_connector_v3 (VLLMPagedMemGPUConnectorV3); v3-prebound, V3 made to discover the pool's
layout before the first store, which vLLM's integration never does (it stands for an LMCache in
which that first store is right). No figure is timed before a probe has passed: one chunk is
stored from 16 blocks and retrieved into 16 others exactly as in the timed rounds, and checked
as below. A probe that fails (wrong bytes, or an error from LMCache) ends the run with one
refusal row per (context, operation): its reason and the probe's counts, no bandwidth (a probe
that passes also serves as LMCache's warm-up before the first timed round). With
vLLM 0.26's packed K/V layout, LMCache 0.5.3 fails it with v2 (its V2 connector keeps split K/V
objects of 8 x 128 elements a token and its kernel moves a packed layout as one plane of that
width, so it addresses slot s at s x 1024 elements where vLLM's slot s starts at s x 2048:
wrong bytes, other blocks overwritten) and with v3 (the first store sizes its objects before
V3 has seen the layout, and the copy into them fails); LMCache issue #4463.

The check compares logical blocks: after the last retrieve, every layer's destination block of
request block i must hold what was written into its source block i (regenerated from the
seed), the source blocks must be unchanged, and every other block of the pool must still hold
the zeros vLLM allocates. Any difference is a MISMATCH, counted in layer-blocks.

With --tutti-json (the store bench's JSON lines of the same run, same directory), each line
also carries the raw O_DIRECT ceiling that bench measured for the same context and operation
and its engines' figures. GB = 1e9 bytes. Output: one JSON line per (context, operation).

Usage: lmcache_micro.py --dir DIR [--contexts 32768,131072] [--repeats 3] [--json FILE]
           [--tutti-json FILE] [--disk-io-threads N] [--device cuda|cpu]
           [--gpu-connector v2|v3|v3-prebound]
Exit status 77: skipped (no CUDA, or LMCache or vLLM cannot run here), with the reason on
stderr; 1: a failed check or a refused run (the probe failed), with its reason.
"""
import argparse
import glob
import importlib.util
import json
import math
import os
import resource
import statistics
import sys
import time

LAYERS, KV_HEADS, HEAD_DIM, BLOCK_TOKENS, CHUNK_TOKENS = 32, 8, 128, 16, 256
ELEM_BYTES = 2  # bf16
BLOCK_ELEMS = BLOCK_TOKENS * KV_HEADS * 2 * HEAD_DIM  # one layer's K and V of one block
TOKEN_BYTES = LAYERS * 2 * KV_HEADS * HEAD_DIM * ELEM_BYTES  # K and V of every layer
NULL_BLOCK = 0  # vLLM's block pool never hands out block 0 (its null block)
CHECK_SLICE_BLOCKS = 1024  # blocks per scratch tensor while filling and checking
POISON = -0x5A5B  # 0xA5A5 as int16
TMPFS_MAGIC = 0x01021994
SKIP = 77
ENGINE_NAME = "tutti-micro"
CLOSE_TIMEOUT_S = 60
PROBE_SEED = 0x70726F6265  # the probe's block tables, KV and tokens
PROBE_BLOCKS = CHUNK_TOKENS // BLOCK_TOKENS  # one chunk
GPU_CONNECTORS = ("v2", "v3", "v3-prebound")


class BenchError(Exception):
    """A size or binding that is wrong, found before LMCache touches the KV."""


def skip(why):
    print(f"lmcache_micro: skipped: {why}", file=sys.stderr)
    sys.exit(SKIP)


def is_tmpfs(path):
    # os.statvfs has no f_type; /proc/self/mounts names the file system of the longest match.
    path = os.path.realpath(path)
    best, fstype = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fs = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fstype = mnt, fs
    return fstype == "tmpfs"


def odirect_works(directory):
    probe = os.path.join(directory, ".odirect-probe")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def drop_page_cache(directory):
    """Drop the page cache (all of it where allowed, else LMCache's files)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True):
            if os.path.isfile(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
        return "fadvise"


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load_native_ops():
    """LMCache silently falls back to slow torch ops when its compiled ops do not load (a torch
    ABI mismatch): load them by file so such a run stops here."""
    spec = importlib.util.find_spec("lmcache")
    if spec is None:
        skip("lmcache is not installed (source the payload's env.sh: "
             "scripts/vllm-gpu-payload.sh install)")
    names = []
    for so in sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "*ops*.so"))):
        name = os.path.basename(so).split(".")[0]
        s = importlib.util.spec_from_file_location("lmcache." + name, so)
        s.loader.exec_module(importlib.util.module_from_spec(s))
        names.append(name)
    if not names:
        raise RuntimeError("LMCache's compiled ops are missing")
    return names


def tutti_rows(path):
    rows = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    return rows


class KVLayout:
    """One layer's paged KV as a vLLM attention backend declares it: shape_of(num_blocks) is its
    logical shape (get_kv_cache_shape), stride_order the permutation from that shape to the
    order of memory (get_kv_cache_stride_order: memory axis i is logical axis stride_order[i]).
    The block axis is found by asking for two pool sizes, not assumed."""

    def __init__(self, name, kv_layout, shape_of, stride_order):
        self.name, self.kv_layout, self.shape_of = name, kv_layout, shape_of
        self.order = tuple(stride_order)
        few, more = tuple(shape_of(3)), tuple(shape_of(5))
        grows = [i for i, (x, y) in enumerate(zip(few, more, strict=False)) if x != y]
        # One axis, and its length the number of blocks (a rank that changes is no layout).
        if len(few) != len(more) or len(grows) != 1 or (few[grows[0]], more[grows[0]]) != (3, 5):
            raise BenchError(f"{name}: no block axis in its KV shape {few} (3 blocks) vs "
                             f"{more} (5 blocks)")
        if sorted(self.order) != list(range(len(few))):
            raise BenchError(f"{name}: stride order {self.order} is no permutation of the "
                             f"{len(few)} axes of {few}")
        self.block_axis = grows[0]  # in the logical shape
        self.memory_block_axis = self.order.index(self.block_axis)

    def memory_shape(self, num_blocks):
        shape = tuple(self.shape_of(num_blocks))
        return tuple(shape[i] for i in self.order)

    def allocate(self, num_blocks, device):
        """The per-layer tensors vLLM 0.26's model runner registers with a connector
        (_allocate_kv_cache_tensors, then _reshape_attention_kv_cache without packing or page
        padding): zeroed bytes, viewed in memory order, permuted back to the logical shape."""
        import torch

        shape = tuple(self.shape_of(num_blocks))
        if math.prod(shape) != num_blocks * BLOCK_ELEMS:
            raise BenchError(
                f"{self.name}: {num_blocks} blocks of shape {shape} hold {math.prod(shape)} "
                f"elements, not {num_blocks} x {BLOCK_ELEMS} ({BLOCK_TOKENS} tokens x "
                f"{KV_HEADS} heads x K and V x {HEAD_DIM})")
        inverse = [self.order.index(i) for i in range(len(shape))]
        return [torch.zeros(num_blocks * BLOCK_ELEMS * ELEM_BYTES, dtype=torch.int8,
                            device=device).view(torch.bfloat16)
                .view(self.memory_shape(num_blocks)).permute(*inverse)
                for _ in range(LAYERS)]

    def in_memory_order(self, layer):
        """A layer's tensor in the order of its memory, as int16 (bits, not values): the view
        LMCache recovers by sorting strides (check_lmcache_reads_the_pool checks it does)."""
        import torch

        view = layer.permute(*self.order)
        if not view.is_contiguous():
            raise BenchError(f"{self.name}: a layer of shape {tuple(layer.shape)} and strides "
                             f"{layer.stride()} is not dense in stride order {self.order}")
        return view.view(torch.int16)


def slot_mapping(block_ids, device=None):
    """Token t of the request sits in slot block_ids[t // 16] * 16 + t % 16: the slot mapping
    LMCache's vLLM adapter builds from a request's block table."""
    import torch

    offsets = torch.arange(BLOCK_TOKENS, dtype=torch.long, device=block_ids.device)
    slots = (block_ids.long()[:, None] * BLOCK_TOKENS + offsets[None, :]).reshape(-1)
    return slots.to(device) if device is not None else slots


def check_slots(slots, tokens, pool_blocks):
    """LMCache's kernels index the pool by slot without a bound: check every slot first."""
    import torch

    if slots.dtype != torch.long or slots.dim() != 1 or len(slots) != tokens:
        raise BenchError(f"slot mapping of {tuple(slots.shape)} {slots.dtype}: want {tokens} "
                         "int64 slots")
    low, high = int(slots.min()), int(slots.max())
    if low < 0 or high >= pool_blocks * BLOCK_TOKENS:
        raise BenchError(f"slots {low}..{high} fall outside the pool of {pool_blocks} blocks "
                         f"({pool_blocks * BLOCK_TOKENS} slots)")


def _bad_blocks(layout, differs):
    """How many blocks of a boolean tensor (in memory order) hold any True."""
    per_block = differs.movedim(layout.memory_block_axis, 0)
    return int(per_block.reshape(per_block.shape[0], -1).any(dim=1).sum())


def _request_blocks(layout, layer_memory_shape, count, generator):
    """The next `count` blocks of request KV (random bits) from the generator."""
    import torch

    shape = list(layer_memory_shape)
    shape[layout.memory_block_axis] = count
    return torch.randint(-32768, 32767, shape, dtype=torch.int16, generator=generator,
                         device=generator.device)


def fill_blocks(layout, layers, ids, seed):
    """Write the request's KV (random bits from seed) into the blocks ids, layer by layer."""
    import torch

    generator = torch.Generator(device=layers[0].device).manual_seed(seed)
    for layer in layers:
        memory = layout.in_memory_order(layer)
        for i in range(0, len(ids), CHECK_SLICE_BLOCKS):
            part = ids[i:i + CHECK_SLICE_BLOCKS]
            memory.index_copy_(layout.memory_block_axis, part,
                               _request_blocks(layout, memory.shape, len(part), generator))


def poison_blocks(layout, layers, ids):
    for layer in layers:
        layout.in_memory_order(layer).index_fill_(layout.memory_block_axis, ids, POISON)


def check_blocks(layout, layers, src_ids, dst_ids, seed):
    """Compare the same logical KV on both sides: block i of the request is src_ids[i] where it
    was written and dst_ids[i] where it was retrieved; both must hold what fill_blocks wrote
    there (regenerated from seed), and every block in neither table must still be zero.
    Returns layer-block counts: (retrieved wrong, source altered, other blocks written)."""
    import torch

    device = layers[0].device
    generator = torch.Generator(device=device).manual_seed(seed)
    pool_blocks = layers[0].shape[layout.block_axis]
    used = torch.zeros(pool_blocks, dtype=torch.bool, device=device)
    used[src_ids] = True
    used[dst_ids] = True
    others = torch.nonzero(~used).reshape(-1)
    axis, wrong, altered, stray = layout.memory_block_axis, 0, 0, 0
    for layer in layers:
        memory = layout.in_memory_order(layer)
        for i in range(0, len(src_ids), CHECK_SLICE_BLOCKS):
            src, dst = src_ids[i:i + CHECK_SLICE_BLOCKS], dst_ids[i:i + CHECK_SLICE_BLOCKS]
            want = _request_blocks(layout, memory.shape, len(src), generator)
            altered += _bad_blocks(layout, memory.index_select(axis, src) != want)
            wrong += _bad_blocks(layout, memory.index_select(axis, dst) != want)
        for i in range(0, len(others), CHECK_SLICE_BLOCKS):
            got = memory.index_select(axis, others[i:i + CHECK_SLICE_BLOCKS])
            stray += _bad_blocks(layout, got != 0)
    return wrong, altered, stray


def packed_kv_format(name):
    """Whether LMCache's format name is one whose rows hold K and V of a head side by side
    (2 x head size, vLLM 0.26's attention backends): ..._CS, ..._TWO_HS."""
    return name.endswith(("_CS", "_TWO_HS"))


def known_cause(fmt_name, connector, object_shapes, error):
    """The known cause of a failed probe where its facts match it (LMCache issue #4463: LMCache
    0.5's in-process connectors and vLLM 0.26's packed K/V layout), else None. object_shapes:
    the shapes LMCache's metadata gives a chunk's objects (metadata.get_shapes)."""
    if not packed_kv_format(fmt_name):
        return None
    row = KV_HEADS * HEAD_DIM
    split = bool(object_shapes) and object_shapes[0][0] == 2
    if connector == "VLLMPagedMemGPUConnectorV2" and split:
        return (f"known LMCache bug (issue #4463): vLLM packs K and V of a head into one row "
                f"({fmt_name}), the V2 connector keeps split K/V objects "
                f"{list(object_shapes[0])}, and its kernel moves a packed layout as one plane of "
                f"the object's width: it addresses slot s at s x {row} elements where vLLM's "
                f"slot s starts at s x {2 * row}")
    if connector == "VLLMPagedMemGPUConnectorV3" and error:
        return ("known LMCache bug (issue #4463): the V3 connector learns the packed layout on "
                "its first transfer, after the store has allocated that chunk's objects in the "
                "split K/V shape")
    return None


def vllm_kv_layout(device_capability):
    """The KV layout of the installed vLLM's attention backend for this model on this GPU:
    FlashAttention, or FlashInfer on compute capability 10 (vLLM's platforms/cuda.py backend
    priorities for a non-MLA causal model), in the cache layout vLLM resolves for LMCache's
    connector, which requires none: VLLM_KV_CACHE_LAYOUT, else NHD."""
    try:
        import vllm
        import vllm.envs as envs
        from vllm.v1.attention.backends import utils as attention_utils
        if device_capability[0] == 10:
            from vllm.v1.attention.backends.flashinfer import FlashInferBackend as backend
        else:
            from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend as backend
    except ImportError as e:
        skip(f"vLLM's attention backend does not import ({e}): its KV layout is what LMCache "
             "reads here (source the payload's env.sh)")
    name = f"vLLM {vllm.__version__} {backend.get_name()}"
    if not hasattr(backend, "get_kv_cache_shape"):
        raise BenchError(f"{name} declares no get_kv_cache_shape: this bench knows vLLM's paged "
                         "KV through it (vLLM 0.26 and older)")
    kv_layout = getattr(envs, "VLLM_KV_CACHE_LAYOUT", None) or "NHD"
    if hasattr(attention_utils, "set_kv_cache_layout"):
        # vLLM resolves its layout from the running engine's config; there is none here.
        attention_utils.set_kv_cache_layout(kv_layout)

    def shape_of(num_blocks):
        return tuple(backend.get_kv_cache_shape(num_blocks, BLOCK_TOKENS, KV_HEADS, HEAD_DIM))

    try:
        order = tuple(backend.get_kv_cache_stride_order())
    except (AttributeError, NotImplementedError):  # what the model runner falls back to
        order = tuple(range(len(shape_of(1))))
    return KVLayout(name, kv_layout, shape_of, order)


class Bench:
    def __init__(self, args, torch):
        self.a, self.torch = args, torch
        self.dev = torch.device("cuda", 0)
        self.max_tokens = max(args.contexts)
        self.storage = "emulated-tmpfs" if is_tmpfs(args.dir) else "disk"
        self.odirect = odirect_works(args.dir)
        self.lmcache_dir = os.path.join(args.dir, "lmcache")
        os.makedirs(self.lmcache_dir, exist_ok=True)
        self.layout = vllm_kv_layout(torch.cuda.get_device_capability(self.dev))
        # vLLM allocates its KV once and registers it once; LMCache's connector keeps the
        # first tensors it is handed. So one pool serves every context: the source and the
        # destination tables of the longest one, and the null block.
        self.pool_blocks = 1 + 2 * (self.max_tokens // BLOCK_TOKENS)
        pool_bytes = LAYERS * self.pool_blocks * BLOCK_ELEMS * ELEM_BYTES
        free, _ = torch.cuda.mem_get_info(self.dev)
        # Scratch: two slices of blocks while checking, LMCache's chunk buffer, and room.
        need = pool_bytes + (1 << 30)
        if free < need:
            raise BenchError(f"the KV pool of {self.pool_blocks} blocks for {self.max_tokens} "
                             f"tokens needs {need / 2**30:.1f} GiB of GPU memory; "
                             f"{free / 2**30:.1f} GiB are free")
        self.kv = self.layout.allocate(self.pool_blocks, self.dev)
        self.engine = self.make_engine()
        self.lmcache_format = self.check_lmcache_reads_the_pool()
        if args.gpu_connector == "v3-prebound":
            self.prebind()

    def make_engine(self):
        import lmcache
        from lmcache.utils import EngineType
        from lmcache.v1.cache_engine import LMCacheEngineBuilder
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.gpu_connector import CreateGPUConnector
        from lmcache.v1.metadata import LMCacheMetadata

        torch = self.torch
        request_gb = self.max_tokens * TOKEN_BYTES / (1 << 30)
        extra = {"use_odirect": self.odirect}
        if self.a.disk_io_threads:
            extra["disk_io_threads"] = self.a.disk_io_threads
        cfg = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK_TOKENS,
            # The one switch LMCache's configuration has between its two in-process connectors
            # for vLLM (CreateGPUConnector); off by default, as in bench/serve.
            use_gpu_connector_v3=self.a.gpu_connector != "v2",
            local_cpu=False,
            max_local_cpu_size=math.ceil(request_gb) + 1,
            local_disk=self.lmcache_dir + "/",
            # An accounting limit, not space used: rounds are removed as they are replaced,
            # but LocalDiskBackend.remove() does not lower the size it counts, so the limit
            # covers every store of the run.
            max_local_disk_size=math.ceil(
                sum(c * TOKEN_BYTES for c in self.a.contexts) * self.a.repeats / (1 << 30)) + 1,
        )
        cfg.extra_config = extra
        meta = LMCacheMetadata(
            model_name="llama-3-8b", world_size=1, local_world_size=1, worker_id=0,
            local_worker_id=0, kv_dtype=torch.bfloat16,
            kv_shape=(LAYERS, 2, CHUNK_TOKENS, KV_HEADS, HEAD_DIM))
        # What vLLM's integration builds (lmcache.integration.vllm), with the layout hint it
        # takes from vLLM.
        self.hints = {"kv_layout": self.layout.kv_layout}
        connector = CreateGPUConnector(cfg, meta, EngineType.VLLM, layout_hints=self.hints)
        engine = LMCacheEngineBuilder.get_or_create(
            ENGINE_NAME, cfg, meta, connector, lambda t, src: t, lambda o, src: o)
        engine.post_init()
        self.version = lmcache.__version__
        self.connector, self.meta = connector, meta
        from lmcache.v1.storage_backend import local_disk_backend

        self.threads = cfg.get_extra_config_value(
            "disk_io_threads", getattr(local_disk_backend, "_DEFAULT_THREAD_COUNT", None))
        return engine

    def check_lmcache_reads_the_pool(self):
        """Run LMCache's own format detection (what its connector does on the first transfer)
        and check it reads the pool with this geometry; returns the format's name."""
        from lmcache.utils import EngineType
        from lmcache.v1.gpu_connector import utils as lmc

        fmt, kv = lmc.normalize_kv_and_discover_format(list(self.kv), EngineType.VLLM,
                                                       layout_hints=self.hints)
        seen = {"layer shape": tuple(kv[0].shape),
                "layers": lmc.get_num_layers(kv, fmt), "blocks": lmc.get_num_blocks(kv, fmt),
                "block tokens": lmc.get_block_size(kv, fmt),
                "elements per token": lmc.get_kv_size(kv, fmt) * lmc.get_hidden_dim_size(kv, fmt)}
        want = {"layer shape": self.layout.memory_shape(self.pool_blocks), "layers": LAYERS,
                "blocks": self.pool_blocks, "block tokens": BLOCK_TOKENS,
                "elements per token": 2 * KV_HEADS * HEAD_DIM}
        name = getattr(fmt, "name", str(fmt))
        if seen != want:
            raise BenchError(f"LMCache reads {self.layout.name}'s KV of "
                             f"{tuple(self.kv[0].shape)} as {name}: {seen}, not {want}")
        return name

    def prebind(self):
        """--gpu-connector v3-prebound: let the V3 connector discover the pool's layout (and
        build the layer groups that size LMCache's objects) before the first store, as its
        first transfer would; vLLM's integration never does this."""
        c = self.connector
        init = getattr(c, "_initialize_kv_cache_pointers", None)
        if init is None or not hasattr(c, "initialize_kvcaches_ptr"):
            raise BenchError(f"--gpu-connector v3-prebound: {type(c).__name__} has no layout "
                             "discovery to run before the first store")
        c.initialize_kvcaches_ptr(kvcaches=list(self.kv))
        init()
        if getattr(self.meta, "kv_layer_groups_manager", None) is None:
            raise BenchError("--gpu-connector v3-prebound: LMCache's metadata has no layer "
                             "groups after the connector's layout discovery")

    def object_shapes(self):
        """The shapes LMCache gives a chunk's memory objects now (they follow the layer groups
        once a V3 connector has built them)."""
        return [list(x) for x in self.meta.get_shapes(CHUNK_TOKENS)]

    def check_connector_bound_the_pool(self):
        """After the first transfer: LMCache's connector addresses this pool, whole."""
        c = self.connector
        if hasattr(c, "kv_cache_pointers"):  # V2
            ptrs = c.kv_cache_pointers.tolist()
        elif getattr(c, "group_kv_cache_pointers_on_gpu", None):  # V3: one list per group
            ptrs = [p for group in c.group_kv_cache_pointers_on_gpu for p in group.tolist()]
        else:
            return  # another connector class keeps no such record
        if not hasattr(c, "page_buffer_size"):
            return
        ours = [t.data_ptr() for t in self.kv]
        if ptrs != ours or c.page_buffer_size != self.pool_blocks * BLOCK_TOKENS:
            raise BenchError(f"LMCache's connector addresses other KV than the pool (layer "
                             f"pointers match: {ptrs == ours}; slots {c.page_buffer_size}, "
                             f"pool {self.pool_blocks * BLOCK_TOKENS})")

    def close(self):
        """Stop LMCache's engine (LMCacheEngineBuilder.destroy, as vLLM's integration does at
        shutdown): its threads would otherwise keep the process alive past its report. False
        if it did not stop within CLOSE_TIMEOUT_S."""
        import threading

        from lmcache.v1.cache_engine import LMCacheEngineBuilder

        stopper = threading.Thread(target=LMCacheEngineBuilder.destroy, args=(ENGINE_NAME,),
                                   daemon=True)
        stopper.start()
        stopper.join(CLOSE_TIMEOUT_S)
        return not stopper.is_alive()

    def wait_stored(self, tokens, timeout):
        deadline = time.monotonic() + timeout
        while self.engine.lookup(tokens, search_range=["LocalDiskBackend"]) < len(tokens):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"LMCache's disk back end did not hold all {len(tokens)} tokens after "
                    f"{timeout} s (see its log above)")
            # Each lookup hashes the whole request under the GIL that LMCache's writer
            # threads share: poll gently.
            time.sleep(0.005)

    def probe(self):
        """One chunk through LMCache before anything is timed: stored from 16 blocks and
        retrieved into 16 others of the pool, exactly as a timed round does (the same engine,
        connector, pool and slot mappings), then checked as the run's data check does, the
        whole pool included. Returns None when every byte is right, else a dict: why (a
        sentence), the probe's counts, LMCache's error if it raised one."""
        torch, layout = self.torch, self.layout
        gen = torch.Generator().manual_seed(PROBE_SEED)
        ids = (torch.randperm(self.pool_blocks - 1, generator=gen)[:2 * PROBE_BLOCKS] + 1)
        ids = ids.to(self.dev)
        src_ids, dst_ids = ids[:PROBE_BLOCKS], ids[PROBE_BLOCKS:]
        toks = torch.randint(0, 128000, (CHUNK_TOKENS,), generator=gen)
        for t in self.kv:
            t.zero_()
        fill_blocks(layout, self.kv, src_ids, PROBE_SEED)
        src_slots, dst_slots = slot_mapping(src_ids, self.dev), slot_mapping(dst_ids, self.dev)
        check_slots(src_slots, CHUNK_TOKENS, self.pool_blocks)
        check_slots(dst_slots, CHUNK_TOKENS, self.pool_blocks)
        out = {"tokens": CHUNK_TOKENS, "blocks": PROBE_BLOCKS}
        try:
            torch.cuda.synchronize()
            self.engine.store(toks, kvcaches=self.kv, slot_mapping=src_slots)
            self.wait_stored(toks, 120.0)
            poison_blocks(layout, self.kv, dst_ids)
            torch.cuda.synchronize()
            drop_page_cache(self.lmcache_dir)
            mask = self.engine.retrieve(toks, kvcaches=self.kv, slot_mapping=dst_slots)
            torch.cuda.synchronize()
        except Exception as e:  # LMCache's own failure is the finding; the bench stops here
            out["error"] = f"{type(e).__name__}: {e}"
            why = f"LMCache's store or retrieve of the probe's chunk failed: {out['error']}"
        else:
            got = int(mask.sum())
            wrong, altered, stray = check_blocks(layout, self.kv, src_ids, dst_ids, PROBE_SEED)
            out.update(retrieved_tokens=got, mismatched_layer_blocks=wrong,
                       source_altered_layer_blocks=altered, stray_layer_blocks=stray)
            self.engine.clear(toks, locations=["LocalDiskBackend"])
            if got == CHUNK_TOKENS and not (wrong or altered or stray):
                self.check_connector_bound_the_pool()
                return None
            why = (f"LMCache moved the wrong bytes: storing one chunk from {PROBE_BLOCKS} "
                   f"blocks and retrieving it into {PROBE_BLOCKS} others left {wrong} of "
                   f"{LAYERS * PROBE_BLOCKS} layer-blocks retrieved wrong, {altered} source "
                   f"layer-blocks altered and {stray} other layer-blocks of the pool written "
                   f"({got} of {CHUNK_TOKENS} tokens retrieved)")
        cause = known_cause(self.lmcache_format, type(self.connector).__name__,
                            self.object_shapes(), out.get("error"))
        out["why"] = why + (f"; {cause}" if cause else "")
        return out

    def context(self, tokens):
        torch, R, layout = self.torch, self.a.repeats, self.layout
        blocks = tokens // BLOCK_TOKENS
        nbytes = tokens * TOKEN_BYTES
        seed = 0x7475747469 + tokens
        gen = torch.Generator().manual_seed(seed)
        # Two disjoint shuffled tables from the pool, never the null block.
        ids = (torch.randperm(self.pool_blocks - 1, generator=gen)[:2 * blocks] + 1).to(self.dev)
        src_ids, dst_ids = ids[:blocks], ids[blocks:]
        for t in self.kv:  # as vLLM allocates it: zeros, so a stray write shows
            t.zero_()
        fill_blocks(layout, self.kv, src_ids, seed)
        src_slots, dst_slots = slot_mapping(src_ids, self.dev), slot_mapping(dst_ids, self.dev)
        check_slots(src_slots, tokens, self.pool_blocks)
        check_slots(dst_slots, tokens, self.pool_blocks)
        timeout = max(120.0, nbytes / 0.2e9)  # far above any sane store time

        store, store_cpu, prev = [], [], None
        for _ in range(R):
            toks = torch.randint(0, 128000, (tokens,), generator=gen)
            if prev is not None:
                self.engine.clear(prev, locations=["LocalDiskBackend"])
            torch.cuda.synchronize()
            c0, t0 = cpu_seconds(), time.perf_counter()
            self.engine.store(toks, kvcaches=self.kv, slot_mapping=src_slots)
            self.wait_stored(toks, timeout)
            dt = time.perf_counter() - t0
            store.append(nbytes / dt / 1e9)
            store_cpu.append((cpu_seconds() - c0) / (nbytes / 1e9))
            self.check_connector_bound_the_pool()
            prev = toks

        retrieve, retrieve_cpu, cache = [], [], None
        for _ in range(R):
            poison_blocks(layout, self.kv, dst_ids)
            torch.cuda.synchronize()
            cache = drop_page_cache(self.lmcache_dir)
            c0, t0 = cpu_seconds(), time.perf_counter()
            mask = self.engine.retrieve(prev, kvcaches=self.kv, slot_mapping=dst_slots)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            got = int(mask.sum())
            if got != tokens:
                raise RuntimeError(f"LMCache retrieved {got} of {tokens} tokens")
            retrieve.append(nbytes / dt / 1e9)
            retrieve_cpu.append((cpu_seconds() - c0) / (nbytes / 1e9))

        bad = check_blocks(layout, self.kv, src_ids, dst_ids, seed)
        self.engine.clear(prev, locations=["LocalDiskBackend"])
        return [("store", store, store_cpu, None, bad),
                ("retrieve", retrieve, retrieve_cpu, cache, bad)]

    def row_base(self, tokens, op):
        return {
            "storage": self.storage, "system": "lmcache", "lmcache_version": self.version,
            "model": "llama-3-8b", "context_tokens": tokens, "op": op,
            "bytes": tokens * TOKEN_BYTES, "odirect": self.odirect,
            "gpu_connector": type(self.connector).__name__,
            "gpu_connector_option": self.a.gpu_connector,
            # v3-prebound runs a step vLLM's integration never runs (prebind)
            "as_vllm_drives_it": self.a.gpu_connector != "v3-prebound",
            "disk_io_threads": self.threads, "kv_layout": self.layout.name,
            "kv_layer_shape": list(self.layout.memory_shape(self.pool_blocks)),
            "kv_cache_layout": self.layout.kv_layout, "lmcache_kv_format": self.lmcache_format,
            "lmcache_object_shapes": self.object_shapes(),
        }

    def emit(self, row):
        if self.a.json:
            with open(self.a.json, "a") as f:
                f.write(json.dumps(row) + "\n")

    def refuse(self, tokens, op, probe):
        """A row without a figure: the probe showed LMCache does not move this KV right."""
        row = dict(self.row_base(tokens, op), gbps=None, bit_exact=False, refused=probe["why"],
                   probe=probe)
        print(f"{self.storage:15s} {tokens:7d} tok {op:8s} lmcache REFUSED: {probe['why']}",
              flush=True)
        self.emit(row)

    def report(self, tokens, op, rounds, cpu, cache, bad, tutti):
        wrong, altered, stray = bad
        exact = not any(bad)
        gbps = statistics.median(rounds)
        row = dict(self.row_base(tokens, op), **{
            "repeats": len(rounds), "gbps": round(gbps, 3),
            "rounds_gbps": [round(x, 3) for x in rounds],
            "cpu_s_per_gb": round(statistics.median(cpu), 4), "bit_exact": exact,
            "mismatched_layer_blocks": wrong, "source_altered_layer_blocks": altered,
            "stray_layer_blocks": stray, "page_cache": cache or "not read",
        })
        same = [t for t in tutti if t.get("context_tokens") == tokens and t.get("op") == op
                and t.get("storage") == self.storage]
        if same:
            row["raw_gbps"] = statistics.median(t["raw_gbps"] for t in same)
            row["ratio_to_raw"] = round(gbps / row["raw_gbps"], 3)
            row["tutti_gbps"] = {t["path"]: t["gbps"] for t in same}
            row["tutti_over_lmcache"] = {t["path"]: round(t["gbps"] / gbps, 2) for t in same}
        line = (f"{self.storage:15s} {tokens:7d} tok {op:8s} lmcache {gbps:7.2f} GB/s "
                f"cpu {row['cpu_s_per_gb']:.3f} s/GB")
        if same:
            line += f"  raw {row['raw_gbps']:.2f}  " + "  ".join(
                f"{p} x{v}" for p, v in row["tutti_over_lmcache"].items())
        print(line + ("  bit-exact" if exact else
                      f"  MISMATCH (layer-blocks: {wrong} retrieved wrong, {altered} source "
                      f"altered, {stray} others written)"), flush=True)
        self.emit(row)
        return exact


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--tutti-json")
    ap.add_argument("--disk-io-threads", type=int, default=0,
                    help="LMCache's disk_io_threads (default: LMCache's own)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--gpu-connector", choices=GPU_CONNECTORS, default="v2",
                    help="v2: what vLLM's LMCacheConnectorV1 builds with LMCache's defaults; "
                         "v3: with use_gpu_connector_v3; v3-prebound: V3 shown the pool's "
                         "layout before the first store (not what vLLM runs)")
    a = ap.parse_args()
    try:
        a.contexts = [int(x) for x in a.contexts.split(",")]
    except ValueError:
        ap.error(f"--contexts: not a list of numbers: {a.contexts}")
    if any(c <= 0 or c % CHUNK_TOKENS for c in a.contexts):
        ap.error(f"--contexts are whole chunks of {CHUNK_TOKENS} tokens")
    if not 1 <= a.repeats <= 16:
        ap.error("--repeats is 1 to 16")
    if not os.path.isdir(a.dir):
        ap.error(f"--dir {a.dir}: not a directory")
    return a


def main():
    a = parse()
    if a.device == "cpu":
        # LMCache 0.5's GPU connectors for vLLM's paged KV are CUDA (and XPU, MUSA, HPU)
        # kernels; on a CPU its engine has no connector for vLLM's layout to measure.
        skip("--device cpu: LMCache has no CPU connector for vLLM's paged KV")
    try:
        import torch
    except ImportError:
        skip("no torch here")
    if not torch.cuda.is_available():
        skip("no CUDA device")
    try:
        ops = load_native_ops()
    except (ImportError, OSError, RuntimeError) as e:  # an ABI mismatch names the symbol
        print(f"lmcache_micro: LMCache's compiled ops do not load: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    b = None
    try:
        b = Bench(a, torch)
        print(f"# LMCache {b.version} ({', '.join(ops)} loaded), {type(b.connector).__name__} "
              f"(--gpu-connector {a.gpu_connector}), local disk in {b.lmcache_dir} ({b.storage}"
              f"{', O_DIRECT' if b.odirect else ', no O_DIRECT'}); KV as {b.layout.name} "
              f"({b.layout.kv_layout}) registers it: {LAYERS} x "
              f"{b.layout.memory_shape(b.pool_blocks)} in memory, LMCache reads "
              f"{b.lmcache_format}; median of {a.repeats} rounds", flush=True)
        refused = b.probe()
        if refused:
            for tokens in a.contexts:
                for op in ("store", "retrieve"):
                    b.refuse(tokens, op, refused)
            return 1
        print(f"# probe: one chunk stored and retrieved bit-exact; LMCache's objects "
              f"{b.object_shapes()}", flush=True)
        tutti = tutti_rows(a.tutti_json)
        ok = True
        for tokens in a.contexts:
            for op, rounds, cpu, cache, bad in b.context(tokens):
                ok &= b.report(tokens, op, rounds, cpu, cache, bad, tutti)
    except BenchError as e:
        print(f"lmcache_micro: BenchError: {e}", file=sys.stderr)
        return 1
    finally:
        if b is not None and not b.close():
            print(f"lmcache_micro: LMCache's engine did not stop within {CLOSE_TIMEOUT_S} s",
                  file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # LMCache leaves threads that are not daemons (its disk back end's, its stats logger's);
    # the run's status must reach the caller rather than wait for them.
    os._exit(status)
