/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * The I/O engines that move a store's objects between its files and paged KV memory, by name.
 * A store is opened with one of them (tutti_store_opts.engine).
 */
#ifndef TUTTI_ENGINE_H
#define TUTTI_ENGINE_H

#include "tutti/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/** I/O engines. */
enum tutti_engine {
	TUTTI_ENGINE_URING =
	    0, /**< io_uring through liburing: batched submission, registered buffers */
	TUTTI_ENGINE_POSIX = 1, /**< a thread pool issuing pread/pwrite */
	/** A GPU-drivable io_uring (NO_MMAP; SQPOLL or a host thread issues what is queued, see
	 *  enum tutti_gpu_io_submit) whose submissions and completions are
	 *  produced by a driver, not by system calls: a CUDA kernel for GPU KV, a host thread
	 *  following the same protocol otherwise. Objects move through object-sized bounce slots of
	 *  the staging memory. Recovery, headers and flushes use the uring engine. */
	TUTTI_ENGINE_GPU_URING = 2,
	/** NVIDIA cuFile (GPUDirect Storage), loaded at run time: GPU KV moves between the files
	 *  and device staging by cuFile (batched where the library can), checked and scattered by
	 *  one kernel launch per layer run; host KV uses the uring engine. Opening fails with
	 *  -EOPNOTSUPP where libcufile is not installed or refuses the store's files, -EIO where
	 *  its driver does not open. */
	TUTTI_ENGINE_GDS = 3,
	/** The engine for where the KV lives: gpu-uring for GPU KV, the CPU-driven uring for host
	 *  KV (posix where io_uring is refused). gpu-uring is set up at the first call with GPU KV;
	 *  where it cannot be (no CUDA device, layer blocks of at most 240 bytes, a GPU with no
	 *  more SMs than gpu_io_sms, no such io_uring, memory that cannot be mapped for the GPU)
	 *  GPU KV moves through the CPU-driven engine too, and one line of the log (level WARN)
	 *  says why. tutti_store_engine() tells which engine moves a kv. */
	TUTTI_ENGINE_AUTO = 4,
};

/**
 * Parse an engine name ("uring", "posix", "gpu-uring", "gds" or "auto").
 * \return the enum tutti_engine value, or -EINVAL for an unknown name or NULL.
 */
TUTTI_API int tutti_engine_parse(const char *name);

/**
 * The name of engine \p engine (enum tutti_engine), as tutti_engine_parse() takes it.
 * \return a static string, or NULL for an unknown value.
 */
TUTTI_API const char *tutti_engine_name(uint32_t engine);

/** Who issues engine gpu-uring's I/O: the driver only writes submissions into the ring. */
enum tutti_gpu_io_submit {
	/** HOST where the store's files are reached by O_DIRECT on a block device, SQPOLL where
	 *  they are page-cache backed (tmpfs). */
	TUTTI_GPU_IO_SUBMIT_AUTO = 0,
	/** The kernel's SQPOLL thread: it picks submissions up as they are written, and spins a
	 *  core for as long as I/O flows, whatever the storage's speed. On page-cache-backed
	 *  files it keeps the copies of inline I/O off the host's threads. */
	TUTTI_GPU_IO_SUBMIT_SQPOLL = 1,
	/** A host thread hands the queued submissions to the kernel every 50 us and sleeps
	 *  between (every millisecond once no I/O has moved for 100 ms, until the next launch):
	 *  no SQ thread, and no SQPOLL privilege needed. Costs a few percent of a core and up to
	 *  a poll period of latency per submission batch. */
	TUTTI_GPU_IO_SUBMIT_HOST = 2,
};

/** How engine gpu-uring's loads bring each object across PCIe into HBM. */
enum tutti_gpu_io_copy {
	/** SM: on emulated NVMe the copy engine's loads were the slower (docs/results.md, rows
	 *  E27, E28). */
	TUTTI_GPU_IO_COPY_AUTO = 0,
	/** The I/O kernel's workers read each object out of its bounce slot with loads across
	 *  PCIe. SMs read host memory at about 0.92x of what the copy engine moves
	 *  (docs/results.md, row F3), so this caps a load below the link. */
	TUTTI_GPU_IO_COPY_SM = 1,
	/** The copy engine: the I/O kernel marks each group of consecutive reads (up to 16 MiB)
	 *  once all of them are in, one of four copy streams waiting on that mark copies the
	 *  group's slots into device staging (twice the bounce slots' size in HBM), and the
	 *  workers check and scatter from there. The whole staging becomes bounce slots, on
	 *  page-cache-backed files too, with no more reads in flight there than SM loads have.
	 *  Needs 64-bit stream memory operations (the load fails with
	 *  -EOPNOTSUPP without them), and the I/O kernel and the copy streams running at once:
	 *  where the GPU's work is serialised (CUDA_LAUNCH_BLOCKING, compute-sanitizer) a load
	 *  stalls until its timeout. Measured slower than SM on emulated NVMe, the more so the
	 *  more staging it has there (rows E27, E28). */
	TUTTI_GPU_IO_COPY_DMA = 2,
};

/**
 * Parse a gpu_io_copy name ("auto", "sm" or "dma").
 * \return the enum tutti_gpu_io_copy value, or -EINVAL for an unknown name or NULL.
 */
TUTTI_API int tutti_gpu_io_copy_parse(const char *name);

/**
 * The name of \p copy (enum tutti_gpu_io_copy), as tutti_gpu_io_copy_parse() takes it.
 * \return a static string, or NULL for an unknown value.
 */
TUTTI_API const char *tutti_gpu_io_copy_name(uint32_t copy);

/**
 * Parse a gpu_io_submit name ("auto", "sqpoll" or "host").
 * \return the enum tutti_gpu_io_submit value, or -EINVAL for an unknown name or NULL.
 */
TUTTI_API int tutti_gpu_io_submit_parse(const char *name);

/**
 * The name of \p submit (enum tutti_gpu_io_submit), as tutti_gpu_io_submit_parse() takes it.
 * \return a static string, or NULL for an unknown value.
 */
TUTTI_API const char *tutti_gpu_io_submit_name(uint32_t submit);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_ENGINE_H */
