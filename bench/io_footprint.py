# SPDX-License-Identifier: Apache-2.0
"""What the GPU's I/O blocks cost the prefill beside them, and what they can move.

The gpu-uring engine's layer kernels keep their blocks resident on the GPU while the prefill runs
(a controller block and one block per I/O worker). This bench separates the three costs that the
layerwise bubble bench (bench/layerwise_ttft.py) sees together, on the same prefill (its
Llama-3-8B-shaped model, a 32K-token prompt of which 30K are cached):

  hold     the prefill's time while B resident blocks of T threads wait, as the I/O workers wait
           for their reads: the cost of occupying SMs alone (no memory traffic)
  pull     the rate at which B blocks of T threads read pinned host memory across PCIe (the
           workers' copy out of their bounce slots: 16-byte cache-volatile loads, 8 in flight
           per thread), alone and beside the prefill, with the prefill's time beside it; with
           --pull-kernels ldcv,bulk also Hopper's bulk copies (cp.async.bulk, the TMA: one
           thread asks for a whole stage of host memory into shared memory, S stages of K KiB
           in flight per block, --bulk-stages SxK), and the pinned copy engine's rate on the
           same bytes in the same run
  copies   the copy engine's rate from pinned host memory into HBM by the size of each copy and
           the streams they are spread over (--copy-shapes MIBxSTREAMS), alone and while
           --host-threads[0] threads read a tmpfs file with O_DIRECT, as io-wq's workers copy
           into gpu-uring's bounce slots: what its loads by the copy engine can move
  host     the O_DIRECT read rate of a tmpfs file (the emulated storage's physical limit, as the
           bubble bench measures it) alone and while the GPU reads host memory at full rate: how
           much the storage and the GPU's reads share the host's memory

Needs a GPU, PyTorch and CuPy (kernels compiled at run time by NVRTC); builds nothing.
Usage: python3 bench/io_footprint.py --out DIR [--shm-file /dev/shm/f] [--repeats 5]
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import cupy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layerwise_ttft import CHUNK, LLAMA3_8B, BLOCK, Model, PagedCache, raw_read_gbps  # noqa: E402

KERNELS = r"""
__device__ static inline unsigned long long now_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Resident until *release (or the deadline): thread 0 polls as an I/O worker polls its ready
 * flag. The other threads keep 64 registers live across the wait, as a worker's do. */
extern "C" __global__ void hold(const volatile int *release, unsigned long long limit_ns,
                                unsigned *sink)
{
	unsigned r[64];
	unsigned s = 0;

#pragma unroll
	for (int k = 0; k < 64; k++) {
		r[k] = blockIdx.x * (k + 1) + threadIdx.x * (k + 3);
	}
	if (threadIdx.x == 0) {
		unsigned long long deadline = now_ns() + limit_ns;

		while (!*release && now_ns() < deadline) {
			__nanosleep(256);
		}
	}
	__syncthreads();
#pragma unroll
	for (int k = 0; k < 64; k++) {
		s ^= r[k] * r[(k + 1) & 63];
	}
	if (s == 0x9e3779b9u) {
		sink[0] = s;
	}
}

/* Block b copies 1 MiB objects b, b + B, ... of src (pinned host memory) to dst (device), as a
 * load worker copies its bounce slot out: ld.global.cv of 16 bytes, 8 in flight per thread. */
extern "C" __global__ void pull(const int4 *src, int4 *dst, unsigned long long objs,
                                unsigned long long obj16, int rounds)
{
	for (int r = 0; r < rounds; r++) {
		for (unsigned long long o = blockIdx.x; o < objs; o += gridDim.x) {
			const int4 *s = src + o * obj16;
			int4 *d = dst + o * obj16;

			for (unsigned long long i = threadIdx.x; i < obj16; i += blockDim.x * 8ull) {
				int4 v[8];
#pragma unroll
				for (int k = 0; k < 8; k++) {
					unsigned long long j = i + (unsigned long long)k * blockDim.x;
					if (j < obj16) {
						v[k] = __ldcv(&s[j]);
					}
				}
#pragma unroll
				for (int k = 0; k < 8; k++) {
					unsigned long long j = i + (unsigned long long)k * blockDim.x;
					if (j < obj16) {
						d[j] = v[k];
					}
				}
			}
		}
	}
}
"""

# Hopper's bulk copies (sm_90): compiled apart, for that architecture only.
KERNELS_SM90 = r"""
#define MAX_STAGES 8

__device__ static inline void bulk_wait(unsigned addr, unsigned parity)
{
	unsigned ok = 0;

	while (!ok) {
		asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
		             "selp.u32 %0, 1, 0, p; }"
		             : "=r"(ok)
		             : "r"(addr), "r"(parity)
		             : "memory");
	}
}

/* As pull, but thread 0 asks the TMA for each stage_bytes piece of the block's objects (a bulk
 * copy from pinned host memory into shared memory, stages of them in flight), and the block
 * stores each landed piece to dst, then hands its stage back. */
extern "C" __global__ void pull_bulk(const char *src, char *dst, unsigned long long objs,
                                     unsigned long long obj_bytes, int rounds, unsigned stages,
                                     unsigned stage_bytes)
{
	extern __shared__ __align__(128) int4 buf[];
	__shared__ __align__(8) unsigned long long bar[MAX_STAGES];
	unsigned long long mine =
	    objs > blockIdx.x ? (objs - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
	unsigned long long pieces = obj_bytes / stage_bytes;
	unsigned long long total = (unsigned long long)rounds * mine * pieces;
	unsigned n16 = stage_bytes / 16;

	if (threadIdx.x == 0) {
		for (unsigned s = 0; s < stages; s++) {
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
			    (unsigned)__cvta_generic_to_shared(&bar[s])));
		}
	}
	__syncthreads();
	/* Iteration k asks for piece k (into the stage piece k - stages left, consumed in the
	 * iteration before) and consumes piece k + 1 - stages. */
	for (unsigned long long k = 0; k < total + stages; k++) {
		if (threadIdx.x == 0 && k < total) {
			unsigned s = k % stages;
			unsigned long long o = blockIdx.x + ((k / pieces) % mine) * gridDim.x;
			unsigned b = (unsigned)__cvta_generic_to_shared(&bar[s]);

			/* The block's plain reads of the stage before the TMA writes it again. */
			asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
			asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b),
			             "r"(stage_bytes)
			             : "memory");
			asm volatile(
			    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
			    "%2, [%3];" ::"r"((unsigned)__cvta_generic_to_shared(buf + (size_t)s * n16)),
			    "l"(src + o * obj_bytes + (k % pieces) * stage_bytes), "r"(stage_bytes), "r"(b)
			    : "memory");
		}
		if (k + 1 >= stages && k + 1 - stages < total) {
			unsigned long long j = k + 1 - stages;
			unsigned s = j % stages;
			unsigned long long o = blockIdx.x + ((j / pieces) % mine) * gridDim.x;
			int4 *d = (int4 *)(dst + o * obj_bytes + (j % pieces) * stage_bytes);
			const int4 *b = buf + (size_t)s * n16;

			bulk_wait((unsigned)__cvta_generic_to_shared(&bar[s]), (unsigned)((j / stages) & 1));
			for (unsigned i = threadIdx.x; i < n16; i += blockDim.x) {
				d[i] = b[i];
			}
			__syncthreads();
		}
	}
}
"""

OBJ = 1 << 20


def prefill_once(model, cache, start, total):
    """GPU time of one suffix prefill (CUDA events on the current stream), in seconds."""
    b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    b.record()
    model.prefill(cache, start, total)
    e.record()
    e.synchronize()
    return b.elapsed_time(e) / 1e3


class Kernels:
    def __init__(self):
        mod = cupy.RawModule(code=KERNELS, options=("--std=c++17",))
        self.hold = mod.get_function("hold")
        self.pull = mod.get_function("pull")
        self.pull_bulk = None
        if torch.cuda.get_device_capability() >= (9, 0):
            # The device's own architecture (CuPy's default), which has the TMA from sm_90 on.
            bulk = cupy.RawModule(code=KERNELS_SM90, options=("--std=c++17",))
            self.pull_bulk = bulk.get_function("pull_bulk")
        self.release = cupy.zeros(1, dtype=cupy.int32)
        self.sink = cupy.zeros(1, dtype=cupy.uint32)

    def hold_start(self, stream, blocks, threads, seconds=30.0):
        self.release.fill(0)
        torch.cuda.synchronize()
        with cupy.cuda.ExternalStream(stream.cuda_stream):
            self.hold((blocks,), (threads,),
                      (self.release, cupy.uint64(int(seconds * 1e9)), self.sink))

    def hold_end(self, stream):
        self.release.fill(1)  # on the null stream, which does not wait for the hold kernel
        stream.synchronize()

    def pull_launch(self, stream, src, dst, blocks, threads, rounds=1, bulk=None):
        """bulk: None for the workers' loads, or (stages, KiB a stage) for the TMA's copies."""
        objs = src.numel() // OBJ
        with cupy.cuda.ExternalStream(stream.cuda_stream):
            if bulk is None:
                self.pull((blocks,), (threads,),
                          (cupy.uint64(src.data_ptr()), cupy.uint64(dst.data_ptr()),
                           cupy.uint64(objs), cupy.uint64(OBJ // 16), cupy.int32(rounds)))
                return
            stages, kib = bulk
            smem = stages * kib << 10
            self.pull_bulk.max_dynamic_shared_size_bytes = smem
            self.pull_bulk((blocks,), (threads,),
                           (cupy.uint64(src.data_ptr()), cupy.uint64(dst.data_ptr()),
                            cupy.uint64(objs), cupy.uint64(OBJ), cupy.int32(rounds),
                            cupy.uint32(stages), cupy.uint32(kib << 10)), shared_mem=smem)


def run_hold(args, k, model, cache, start, total, rows):
    side = torch.cuda.Stream()
    alone = statistics.median(prefill_once(model, cache, start, total) for _ in range(args.repeats))
    rows.append(dict(experiment="hold", blocks=0, threads=0, prefill_s=alone))
    print(json.dumps(rows[-1]), flush=True)
    for blocks, threads in args.hold_configs:
        times = []
        for _ in range(args.repeats):
            k.hold_start(side, blocks, threads)
            time.sleep(0.002)  # every block resident before the prefill starts
            times.append(prefill_once(model, cache, start, total))
            k.hold_end(side)
        t = statistics.median(times)
        rows.append(dict(experiment="hold", blocks=blocks, threads=threads, prefill_s=t,
                         slowdown=t / alone, regs=k.hold.num_regs))
        print(json.dumps(rows[-1]), flush=True)


def copy_engine_gbps(src, dst, repeats):
    """The pinned copy engine's rate on the same bytes (host to device), median of repeats."""
    rates = []
    for _ in range(repeats):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record()
        dst.copy_(src, non_blocking=True)
        e.record()
        e.synchronize()
        rates.append(src.numel() / (b.elapsed_time(e) / 1e3) / 1e9)
    return statistics.median(rates)


def run_pull(args, k, model, cache, start, total, rows):
    src = torch.empty(args.pull_mib << 20, dtype=torch.uint8, pin_memory=True)
    src.random_(0, 255)
    dst = torch.empty_like(src, device="cuda")
    want = src.to("cuda")
    side = torch.cuda.Stream()
    rows.append(dict(experiment="pull-copy-engine", bytes=src.numel(),
                     copy_gbps=copy_engine_gbps(src, dst, args.repeats)))
    print(json.dumps(rows[-1]), flush=True)
    alone_prefill = statistics.median(
        prefill_once(model, cache, start, total) for _ in range(args.repeats))
    runs = []
    for kernel in args.pull_kernels:
        if kernel == "ldcv":
            runs += [("ldcv", None, c) for c in args.pull_configs]
        elif k.pull_bulk is None:
            print(json.dumps(dict(experiment="pull", kernel="bulk", skipped="needs sm_90")))
        else:
            runs += [("bulk", st, c) for st in args.bulk_stages for c in args.pull_configs]
    for kernel, bulk, (blocks, threads) in runs:
        for beside in (False, True):
            rates, prefills = [], []
            dst.zero_()
            for _ in range(args.repeats):
                torch.cuda.synchronize()
                b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                b.record(side)
                k.pull_launch(side, src, dst, blocks, threads, bulk=bulk)
                e.record(side)
                if beside:
                    prefills.append(prefill_once(model, cache, start, total))
                e.synchronize()
                rates.append(src.numel() / (b.elapsed_time(e) / 1e3) / 1e9)
            if not torch.equal(dst, want):
                raise AssertionError(f"pull kernel {kernel} {bulk} copied wrong bytes")
            row = dict(experiment="pull", kernel=kernel, blocks=blocks, threads=threads,
                       beside_prefill=beside, pull_gbps=statistics.median(rates))
            if bulk is not None:
                row.update(stages=bulk[0], stage_kib=bulk[1])
            if beside:
                row.update(prefill_s=statistics.median(prefills),
                           slowdown=statistics.median(prefills) / alone_prefill)
            rows.append(row)
            print(json.dumps(row), flush=True)


def shm_file(args):
    """The emulated storage's file of --host-mib random bytes in tmpfs: its path and size."""
    path = Path(args.shm_file)
    nbytes = args.host_mib << 20
    with open(path, "wb") as f:
        chunk = os.urandom(64 << 20)
        for _ in range(nbytes // len(chunk)):
            f.write(chunk)
    return path, nbytes


def run_host(args, k, rows):
    path, nbytes = shm_file(args)
    src = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty_like(src, device="cuda")
    side = torch.cuda.Stream()
    try:
        for threads in args.host_threads:
            for with_gpu in (False, True):
                rates, gpu_rates = [], []
                for _ in range(args.repeats):
                    stop = threading.Event()
                    moved = [0, 0.0]

                    def gpu_reader():
                        t0 = time.perf_counter()
                        while not stop.is_set():
                            k.pull_launch(side, src, dst, 64, 256)
                            side.synchronize()
                            moved[0] += src.numel()
                        moved[1] = time.perf_counter() - t0
                    th = threading.Thread(target=gpu_reader) if with_gpu else None
                    if th:
                        th.start()
                        time.sleep(0.1)
                    rates.append(raw_read_gbps(str(path), nbytes, threads=threads))
                    if th:
                        stop.set()
                        th.join()
                        gpu_rates.append(moved[0] / moved[1] / 1e9)
                row = dict(experiment="host", storage="emulated-nvme", read_threads=threads,
                           gpu_reading_host=with_gpu, raw_gbps=statistics.median(rates),
                           raw_gbps_all=[round(r, 2) for r in rates])
                if with_gpu:
                    row["gpu_pull_gbps"] = statistics.median(gpu_rates)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        path.unlink(missing_ok=True)


def copies_gbps(src, dst, mib, streams):
    """Host-to-device copies of MIB each, in turn over STREAMS streams; GB/s of the whole."""
    n = mib << 20
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for s in streams:
        s.wait_event(begin)
    for i, off in enumerate(range(0, src.numel(), n)):
        with torch.cuda.stream(streams[i % len(streams)]):
            dst[off:off + n].copy_(src[off:off + n], non_blocking=True)
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    end.record()
    end.synchronize()
    return src.numel() / (begin.elapsed_time(end) / 1e3) / 1e9


def run_copies(args, rows):
    path, nbytes = shm_file(args)
    src = torch.empty(args.pull_mib << 20, dtype=torch.uint8, pin_memory=True)
    src.random_(0, 255)
    dst = torch.empty_like(src, device="cuda")
    want = src.to("cuda")
    try:
        for mib, nr_streams in args.copy_shapes:
            streams = [torch.cuda.Stream() for _ in range(nr_streams)]
            for readers in (0, args.host_threads[0]):
                stop, read = threading.Event(), []

                def reader():
                    while not stop.is_set():
                        read.append(raw_read_gbps(str(path), nbytes, threads=readers))
                th = threading.Thread(target=reader) if readers else None
                if th:
                    th.start()
                    time.sleep(0.2)
                dst.zero_()
                rates = [copies_gbps(src, dst, mib, streams) for _ in range(args.repeats)]
                if th:
                    stop.set()
                    th.join()
                if not torch.equal(dst, want):
                    raise AssertionError(f"copies of {mib} MiB on {nr_streams} streams: "
                                         "wrong bytes")
                row = dict(experiment="copies", copy_mib=mib, streams=nr_streams,
                           read_threads=readers, copy_gbps=statistics.median(rates),
                           copy_gbps_all=[round(r, 2) for r in rates])
                if read:
                    row["raw_gbps"] = statistics.median(read)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        path.unlink(missing_ok=True)


def pairs(text):
    return [tuple(int(x) for x in p.split("x")) for p in text.split(",")]


def pull_kernels(text):
    names = text.split(",")
    for n in names:
        if n not in ("ldcv", "bulk"):
            raise argparse.ArgumentTypeError(f"{n}: the kernels are ldcv and bulk")
    return names


def bulk_stages(text):
    """STAGESxKIB pairs: at most the kernel's 8 stages, each a whole share of a 1 MiB object."""
    out = pairs(text)
    for stages, kib in out:
        if not 1 <= stages <= 8 or kib < 1 or (OBJ >> 10) % kib or stages * kib > 224:
            raise argparse.ArgumentTypeError(
                f"{stages}x{kib}: 1 to 8 stages of a KiB count that divides {OBJ >> 10}, "
                "224 KiB of shared memory at most")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--experiments", default="hold,pull,host")
    ap.add_argument("--hold-configs", type=pairs,
                    default=pairs("1x256,2x256,3x256,4x256,6x256,9x256,12x768,33x256,65x256"))
    ap.add_argument("--pull-configs", type=pairs,
                    default=pairs("1x256,1x768,2x768,3x768,4x768,8x256,32x256,11x768"))
    ap.add_argument("--pull-mib", type=int, default=4096)
    ap.add_argument("--pull-kernels", type=pull_kernels, default=["ldcv"],
                    help="ldcv (the workers' loads) and/or bulk (the TMA, sm_90)")
    ap.add_argument("--bulk-stages", type=bulk_stages, default=bulk_stages("4x32,8x16,2x64"),
                    help="the TMA's stages per block (1-8) x KiB a stage "
                         "(dividing 1024; 224 KiB in all)")
    ap.add_argument("--shm-file", default="/dev/shm/tutti-io-footprint")
    ap.add_argument("--host-mib", type=int, default=4096)
    ap.add_argument("--host-threads", type=lambda s: [int(x) for x in s.split(",")],
                    default=[16, 8])
    ap.add_argument("--copy-shapes", type=pairs, default=pairs("1x1,4x1,4x4,16x4,64x1"),
                    help="MiB a copy x streams, for the copies experiment")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    total, start = 32768, 30720
    shape = LLAMA3_8B
    model = Model(shape)
    cache = PagedCache(shape, total // BLOCK)
    assert start % CHUNK == 0
    k = Kernels()
    rows = [dict(experiment="machine", gpu=torch.cuda.get_device_name(),
                 sms=torch.cuda.get_device_properties(0).multi_processor_count,
                 cpus=os.cpu_count())]
    print(json.dumps(rows[-1]), flush=True)
    for _ in range(3):
        prefill_once(model, cache, start, total)  # warm up
    todo = args.experiments.split(",")
    try:
        if "hold" in todo:
            run_hold(args, k, model, cache, start, total, rows)
        if "pull" in todo:
            run_pull(args, k, model, cache, start, total, rows)
        if "host" in todo:
            run_host(args, k, rows)
        if "copies" in todo:
            run_copies(args, rows)
    finally:
        with open(out / "io-footprint.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
