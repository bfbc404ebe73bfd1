/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File pool: creating, checking and resizing the data files, and the slot free lists.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pool/pool.h"

struct pool_dir {
	int dir_fd; /* the store directory, holding the owner lock (lock_owner) */
	int fd;
	uint64_t uid;   /* the store id in this directory's superblock */
	bool created;   /* by this open: removed again if the open fails */
	uint32_t *free; /* stack of free local slot ids; top at free[nr_free - 1] */
	uint32_t nr_free;
};

struct tt_pool {
	uint32_t nr_dirs;
	uint32_t slots_per_dir;
	uint64_t slot_bytes;
	int *fds;
	struct pool_dir *dirs;
	const struct tt_log *log;
};

/* ---- opening one directory ---- */

/*
 * How long an open waits for a data file whose directory nobody holds but whose own lock is
 * still taken. That is the I/O ring of an owner that was killed: the kernel tears a ring down
 * after its process is gone, and until its exit work has run the ring holds the file (and the
 * lock on it) and may still complete the dead owner's last writes. Waiting for the lock means
 * that nothing of the dead owner lands after the new owner starts. The wait is typically well
 * under a second; the bound only matters when a process of an older Tutti, which locks the data
 * file alone, has the store open.
 */
#define DATA_LOCK_WAIT_MS 5000u
#define DATA_LOCK_POLL_US 2000u

/*
 * Open the store directory (following a symbolic link to a directory, as any path does),
 * creating it when asked. The directory's descriptor carries the owner lock and is the base of
 * every path inside the store.
 */
static int
open_store_dir(const char *dir, bool create, const struct tt_log *log, int *out)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT && create) {
		if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
			int rc = -errno;

			tt_log_err(log, "cannot create store directory %s: %s", dir,
			           tutti_strerror(rc));
			return rc;
		}
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (fd < 0) {
		int rc = -errno;

		if (rc == -ENOTDIR) {
			tt_log_err(log, "%s: not a directory", dir);
		} else {
			tt_log_err(log, "%s: %s", dir, tutti_strerror(rc));
		}
		return rc;
	}
	*out = fd;
	return 0;
}

/*
 * The owner lock: an exclusive flock on the store directory. No I/O ring ever sees this
 * descriptor, so the lock goes with the process that holds it, at exit or at a kill, and every
 * step that creates or removes the data file runs under it: two processes creating one store
 * are serialised here, before either touches the file.
 */
static int
lock_owner(int dir_fd, const char *dir, const struct tt_log *log)
{
	int rc;

	if (flock(dir_fd, LOCK_EX | LOCK_NB) == 0) {
		return 0;
	}
	rc = -errno;
	if (rc == -EWOULDBLOCK) {
		tt_log_err(log, "%s is in use by another store handle or process", dir);
		return -EBUSY;
	}
	if (rc == -EBADF || rc == -ENOLCK || rc == -EOPNOTSUPP || rc == -EINVAL) {
		/* A filesystem that cannot lock directories (NFS emulates flock with write
		 * locks): the data file's lock alone guards the store, as it did before. */
		tt_log_info(log,
		            "%s: the directory cannot be locked (%s); the data file's lock "
		            "alone guards the store",
		            dir, tutti_strerror(rc));
		return 0;
	}
	tt_log_err(log, "%s: locking the store directory: %s", dir, tutti_strerror(rc));
	return rc;
}

/*
 * Lock the data file itself: older builds lock only this, and a killed owner's I/O ring holds
 * it until the kernel has finished with the ring (DATA_LOCK_WAIT_MS says why it is waited for).
 */
static int
lock_data_file(int fd, const char *path, const struct tt_log *log)
{
	uint64_t t0 = tt_now_ns();
	bool waited = false;

	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK) {
			int rc = -errno;

			tt_log_err(log, "%s: locking the data file: %s", path, tutti_strerror(rc));
			return rc;
		}
		if (tt_now_ns() - t0 > (uint64_t)DATA_LOCK_WAIT_MS * 1000000u) {
			tt_log_err(log,
			           "%s is in use by another store handle or process: still locked "
			           "after %u ms (a process of an older Tutti, or a killed owner "
			           "whose I/O the kernel has not finished)",
			           path, DATA_LOCK_WAIT_MS);
			return -EBUSY;
		}
		waited = true;
		usleep(DATA_LOCK_POLL_US);
	}
	if (waited) {
		tt_log_info(log, "%s: waited %.3f s for a previous owner's I/O to finish", path,
		            (double)(tt_now_ns() - t0) / 1e9);
	}
	return 0;
}

/*
 * Open (or, with \p create, create) the data file in the directory \p dir_fd without following
 * a symbolic link and without blocking (a FIFO in its place would block an open for reading
 * until a writer came), and check that it is a regular file; when \p writable, also that it has
 * no other hard link, whose file every write of the store would change too. *created says
 * whether this call created it. Returns the descriptor or -errno, having logged why.
 */
static int
open_data_fd(int dir_fd, const char *path, bool writable, bool create, bool *created,
             const struct tt_log *log)
{
	int flags = (writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	int fd = openat(dir_fd, TT_POOL_FILE_NAME, flags);
	struct stat st;
	int rc;

	*created = false;
	if (fd < 0 && errno == ENOENT && create) {
		fd = openat(dir_fd, TT_POOL_FILE_NAME, flags | O_CREAT | O_EXCL, 0600);
		*created = fd >= 0;
		if (fd < 0 && errno == EEXIST) {
			/* Made meanwhile by a process that does not take the owner lock (an older
			 * build): it is not ours to initialise or remove, only to open. */
			fd = openat(dir_fd, TT_POOL_FILE_NAME, flags);
		}
	}
	/* O_DIRECT is refused by a FIFO, a socket or a device: say what the file is instead. */
	if (fd < 0 && errno == EINVAL &&
	    fstatat(dir_fd, TT_POOL_FILE_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		tt_log_err(log, "%s is not a regular file (file type 0%o): not a Tutti store", path,
		           (unsigned)(st.st_mode & S_IFMT) >> 12);
		return -EPROTO;
	}
	if (fd < 0) {
		rc = errno == EINVAL ? -EOPNOTSUPP : -errno;
		tt_log_err(log, "cannot open %s: %s%s", path, tutti_strerror(rc),
		           rc == -EOPNOTSUPP ? " (the filesystem refuses O_DIRECT)"
		           : rc == -ELOOP    ? " (a symbolic link: refused inside a store)"
		                             : "");
		return rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
		goto err;
	}
	if (!S_ISREG(st.st_mode)) {
		tt_log_err(log, "%s is not a regular file (file type 0%o): not a Tutti store", path,
		           (unsigned)(st.st_mode & S_IFMT) >> 12);
		rc = -EPROTO;
		goto err;
	}
	if (writable && st.st_nlink != 1) {
		tt_log_err(log,
		           "%s has %ju hard links: the store would also write the file of every "
		           "other name; remove the other links",
		           path, (uintmax_t)st.st_nlink);
		rc = -EMLINK;
		goto err;
	}
	/* Regular files ignore O_NONBLOCK; dropped so that no later call sees it. */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		rc = -errno;
		goto err;
	}
	return fd;

err:
	close(fd);
	if (*created) {
		unlinkat(dir_fd, TT_POOL_FILE_NAME, 0);
	}
	return rc;
}

/* O_DIRECT needs buffers, offsets and lengths aligned to the device; we align to TUTTI_ALIGN. */
static int
check_dio_alignment(int fd, const char *path, const struct tt_log *log)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0 ||
	    !(stx.stx_mask & STATX_DIOALIGN)) {
		return 0; /* older kernel or filesystem: the first O_DIRECT I/O will tell */
	}
	if (stx.stx_dio_offset_align == 0) {
		tt_log_err(log, "%s: the filesystem does not support O_DIRECT", path);
		return -EOPNOTSUPP;
	}
	if (stx.stx_dio_offset_align > TUTTI_ALIGN || stx.stx_dio_mem_align > TUTTI_ALIGN) {
		tt_log_err(log,
		           "%s: O_DIRECT needs %u-byte alignment, above the %u bytes Tutti uses",
		           path, stx.stx_dio_offset_align, TUTTI_ALIGN);
		return -EOPNOTSUPP;
	}
	return 0;
}

static int
write_superblock(int fd, const struct tt_superblock *sb)
{
	uint8_t *buf = tt_aligned_alloc(TT_SB_BYTES);
	ssize_t n;

	if (buf == NULL) {
		return -ENOMEM;
	}
	tt_sb_encode(sb, buf);
	n = pwrite(fd, buf, TT_SB_BYTES, 0);
	tt_aligned_free(buf);
	if (n < 0) {
		return -errno;
	}
	if (n != TT_SB_BYTES) {
		return -EIO;
	}
	/* The superblock is the store's identity; make it durable before any slot refers to it. */
	return fdatasync(fd) == 0 ? 0 : -errno;
}

/* Read the superblock; 1 if the file is empty (a new store), 0 if read, or -errno. A store of
 * another format version is named as such in the log. */
static int
read_superblock(int fd, struct tt_superblock *sb, const char *path, const struct tt_log *log)
{
	uint8_t *buf = tt_aligned_alloc(TT_SB_BYTES);
	ssize_t n;
	int rc;

	if (buf == NULL) {
		return -ENOMEM;
	}
	n = pread(fd, buf, TT_SB_BYTES, 0);
	if (n < 0) {
		rc = -errno;
	} else if (n == 0) {
		rc = 1;
	} else {
		rc = tt_sb_decode(buf, (size_t)n, sb);
		if (rc == -EPROTO && n >= 12 && memcmp(buf, TT_SB_MAGIC, 8) == 0) {
			tt_log_err(log,
			           "%s: a store of format version %u; this build reads version "
			           "%u: remove the file or use another directory",
			           path, (unsigned)buf[8] | (unsigned)buf[9] << 8, TT_SB_VERSION);
		}
	}
	tt_aligned_free(buf);
	return rc;
}

static int
sb_matches(const struct tt_superblock *sb, const struct tt_pool_conf *conf, const char *path)
{
	struct tt_geo g;

	if (tt_geo_derive(&sb->geo, &g) != 0 || !tt_geo_equal(&g, conf->geo) ||
	    sb->slot_bytes != conf->geo->slot_bytes || sb->key_bytes != conf->key_bytes ||
	    memcmp(sb->ns_fp, conf->ns_fp, TT_NS_FP_BYTES) != 0 ||
	    sb->data_off != TT_POOL_DATA_OFF) {
		tt_log_err(conf->log,
		           "%s holds a store of another geometry, key size or namespace "
		           "(%u layers, %u KV heads, head dim %u, %u-byte keys); use another "
		           "directory or remove the file",
		           path, sb->geo.nr_layers, sb->geo.nr_kv_heads, sb->geo.head_dim,
		           sb->key_bytes);
		return -EEXIST;
	}
	return 0;
}

/* Give the file exactly the requested slots, reserving the space now so writes never fail
 * for lack of it. */
static int
size_file(int fd, const struct tt_pool_conf *conf, const char *path)
{
	uint64_t bytes = TT_POOL_DATA_OFF + conf->slots_per_dir * conf->geo->slot_bytes;
	struct stat st;
	int rc;

	if (fstat(fd, &st) != 0) {
		return -errno;
	}
	if ((uint64_t)st.st_size > bytes && ftruncate(fd, (off_t)bytes) != 0) {
		return -errno;
	}
	/* Not posix_fallocate: its fallback writes single bytes, which O_DIRECT refuses. */
	if (fallocate(fd, 0, 0, (off_t)bytes) == 0) {
		return 0;
	}
	rc = -errno;
	if (rc == -EOPNOTSUPP && ftruncate(fd, (off_t)bytes) == 0) {
		tt_log_warn(conf->log,
		            "%s: no fallocate; the file is sparse and a full disk "
		            "will show up as write errors",
		            path);
		return 0;
	}
	tt_log_err(conf->log, "%s: cannot reserve %llu bytes: %s", path, (unsigned long long)bytes,
	           tutti_strerror(rc));
	return rc;
}

static int
data_path(const char *dir, char *path, size_t len)
{
	if (snprintf(path, len, "%s/%s", dir, TT_POOL_FILE_NAME) >= (int)len) {
		return -ENAMETOOLONG;
	}
	return 0;
}

/* A fresh random id for a new store: its slots are never mistaken for those of an earlier store
 * that held the same file. */
static int
new_store_uid(uint64_t *uid)
{
	ssize_t n = getrandom(uid, sizeof(*uid), 0);

	if (n != (ssize_t)sizeof(*uid)) {
		return n < 0 ? -errno : -EIO;
	}
	return 0;
}

/*
 * Open, lock and (when new or resized) initialise the data file of the directory \p pd->dir_fd,
 * whose owner lock is held.
 */
static int
open_data_file(const char *dir, const struct tt_pool_conf *conf, struct pool_dir *pd)
{
	char path[PATH_MAX];
	struct tt_superblock sb;
	bool created, fresh;
	int fd, rc;

	rc = data_path(dir, path, sizeof(path));
	if (rc < 0) {
		return rc;
	}
	fd = open_data_fd(pd->dir_fd, path, true, conf->create, &created, conf->log);
	if (fd < 0) {
		return fd;
	}
	rc = lock_data_file(fd, path, conf->log);
	if (rc < 0) {
		goto err_close;
	}
	rc = check_dio_alignment(fd, path, conf->log);
	if (rc < 0) {
		goto err_close;
	}
	rc = read_superblock(fd, &sb, path, conf->log);
	if (rc == -EINVAL) {
		rc = -EOPNOTSUPP; /* an O_DIRECT read refused despite the open succeeding */
		tt_log_err(conf->log, "%s: O_DIRECT reads fail on this filesystem", path);
		goto err_close;
	}
	if (rc < 0) {
		tt_log_err(conf->log, "%s: not a Tutti store or damaged superblock: %s", path,
		           tutti_strerror(rc));
		goto err_close;
	}
	fresh = rc == 1;
	if (fresh && !conf->create) {
		tt_log_err(conf->log, "%s is empty: no store here (open with TUTTI_OPEN_CREATE)",
		           path);
		rc = -ENOENT;
		goto err_close;
	}
	if (fresh) {
		rc = new_store_uid(&sb.store_uid);
		/* A file someone else made empty (touch, a copy) gets the mode of one made here. */
		if (rc == 0 && !created && fchmod(fd, 0600) != 0) {
			rc = -errno;
			tt_log_err(conf->log,
			           "%s: cannot make the empty file private (mode 0600): %s", path,
			           tutti_strerror(rc));
		}
	} else {
		rc = sb_matches(&sb, conf, path);
	}
	if (rc < 0) {
		goto err_close;
	}
	pd->uid = sb.store_uid;
	memset(&sb, 0, sizeof(sb));
	sb.version = TT_SB_VERSION;
	sb.geo = conf->geo->g;
	sb.key_bytes = conf->key_bytes;
	memcpy(sb.ns_fp, conf->ns_fp, TT_NS_FP_BYTES);
	sb.slot_bytes = conf->geo->slot_bytes;
	sb.data_off = TT_POOL_DATA_OFF;
	sb.nr_slots = conf->slots_per_dir;
	sb.store_uid = pd->uid;
	/*
	 * A new store gets its superblock before its size, a resized one after: a process killed
	 * in between leaves an empty file or a valid superblock (a short file is sized again at the
	 * next open), never a sized file without an identity, so a superblock of zeros can only be
	 * damage and is refused.
	 */
	rc = fresh ? write_superblock(fd, &sb) : 0;
	if (rc == 0) {
		rc = size_file(fd, conf, path);
	}
	if (rc == 0 && !fresh) {
		rc = write_superblock(fd, &sb);
	}
	if (rc < 0) {
		tt_log_err(conf->log, "%s: cannot create or resize the store: %s", path,
		           tutti_strerror(rc));
		goto err_close;
	}
	pd->fd = fd;
	pd->created = created;
	return 0;

err_close:
	/* Only a file this open created, under the owner lock it still holds: the one it removes
	 * is the one it made, and nobody else can have started using it. */
	if (created) {
		unlinkat(pd->dir_fd, TT_POOL_FILE_NAME, 0);
	}
	close(fd);
	return rc;
}

/* ---- pool ---- */

int
tt_pool_open(const struct tt_pool_conf *conf, struct tt_pool **out)
{
	struct tt_pool *pool;
	int rc;

	*out = NULL;
	if (conf->nr_dirs == 0 || conf->nr_dirs > TT_POOL_MAX_DIRS || conf->slots_per_dir == 0 ||
	    conf->slots_per_dir * conf->nr_dirs >= UINT32_MAX) {
		return -EINVAL;
	}
	pool = tt_calloc(1, sizeof(*pool));
	if (pool == NULL) {
		return -ENOMEM;
	}
	pool->nr_dirs = conf->nr_dirs;
	pool->slots_per_dir = (uint32_t)conf->slots_per_dir;
	pool->slot_bytes = conf->geo->slot_bytes;
	pool->log = conf->log;
	pool->fds = tt_calloc(conf->nr_dirs, sizeof(*pool->fds));
	pool->dirs = tt_calloc(conf->nr_dirs, sizeof(*pool->dirs));
	if (pool->fds == NULL || pool->dirs == NULL) {
		rc = -ENOMEM;
		goto err;
	}
	for (uint32_t d = 0; d < conf->nr_dirs; d++) {
		pool->dirs[d].fd = pool->fds[d] = pool->dirs[d].dir_fd = -1;
	}
	for (uint32_t d = 0; d < conf->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		rc = open_store_dir(conf->dirs[d], conf->create, conf->log, &pd->dir_fd);
		if (rc == 0) {
			rc = lock_owner(pd->dir_fd, conf->dirs[d], conf->log);
		}
		if (rc == 0) {
			rc = open_data_file(conf->dirs[d], conf, pd);
		}
		if (rc < 0) {
			goto err;
		}
		pool->fds[d] = pd->fd;
		pd->free = tt_malloc((size_t)pool->slots_per_dir * sizeof(*pd->free));
		if (pd->free == NULL) {
			rc = -ENOMEM;
			goto err;
		}
		/* Pushed in reverse so that allocation walks the file from its start. */
		for (uint32_t i = 0; i < pool->slots_per_dir; i++) {
			pd->free[i] = pool->slots_per_dir - 1 - i;
		}
		pd->nr_free = pool->slots_per_dir;
	}
	*out = pool;
	return 0;

err:
	/* A failed open leaves no preallocated file behind, however large: each was created
	 * by this open under the owner lock, which is still held. */
	for (uint32_t d = 0; pool->dirs != NULL && d < conf->nr_dirs; d++) {
		if (pool->dirs[d].created) {
			unlinkat(pool->dirs[d].dir_fd, TT_POOL_FILE_NAME, 0);
		}
	}
	tt_pool_close(pool);
	return rc;
}

void
tt_pool_close(struct tt_pool *pool)
{
	if (pool == NULL) {
		return;
	}
	for (uint32_t d = 0; pool->dirs != NULL && d < pool->nr_dirs; d++) {
		if (pool->dirs[d].fd >= 0) {
			/* Unlock explicitly: another reference to the open file (an I/O ring being
			 * torn down) must not keep the store locked after close. */
			flock(pool->dirs[d].fd, LOCK_UN);
			close(pool->dirs[d].fd);
		}
		/* The owner lock last: the data file is released before another opener may go. */
		if (pool->dirs[d].dir_fd >= 0) {
			close(pool->dirs[d].dir_fd);
		}
		tt_free(pool->dirs[d].free);
	}
	tt_free(pool->dirs);
	tt_free(pool->fds);
	tt_free(pool);
}

uint32_t
tt_pool_nr_dirs(const struct tt_pool *pool)
{
	return pool->nr_dirs;
}

uint32_t
tt_pool_nr_slots(const struct tt_pool *pool)
{
	return pool->nr_dirs * pool->slots_per_dir;
}

uint32_t
tt_pool_nr_free(const struct tt_pool *pool)
{
	uint32_t n = 0;

	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		n += pool->dirs[d].nr_free;
	}
	return n;
}

const int *
tt_pool_fds(const struct tt_pool *pool)
{
	return pool->fds;
}

void
tt_pool_locate(const struct tt_pool *pool, uint32_t slot, uint32_t *dir, uint64_t *off)
{
	uint32_t local = slot % pool->slots_per_dir;

	*dir = slot / pool->slots_per_dir;
	*off = TT_POOL_DATA_OFF + (uint64_t)local * pool->slot_bytes;
}

int
tt_pool_alloc(struct tt_pool *pool, uint32_t hint_dir, uint32_t *slot)
{
	for (uint32_t i = 0; i < pool->nr_dirs; i++) {
		uint32_t d = (hint_dir + i) % pool->nr_dirs;
		struct pool_dir *pd = &pool->dirs[d];

		if (pd->nr_free > 0) {
			*slot = d * pool->slots_per_dir + pd->free[--pd->nr_free];
			return 0;
		}
	}
	return -ENOSPC;
}

void
tt_pool_free(struct tt_pool *pool, uint32_t slot)
{
	struct pool_dir *pd = &pool->dirs[slot / pool->slots_per_dir];

	pd->free[pd->nr_free++] = slot % pool->slots_per_dir;
}

uint64_t
tt_pool_store_uid(const struct tt_pool *pool, uint32_t dir)
{
	return pool->dirs[dir].uid;
}

void
tt_pool_reset_free(struct tt_pool *pool, const uint8_t *used)
{
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		pd->nr_free = 0;
		/* Pushed in reverse so that allocation walks the file from its start. */
		for (uint32_t i = pool->slots_per_dir; i-- > 0;) {
			if (!used[(uint64_t)d * pool->slots_per_dir + i]) {
				pd->free[pd->nr_free++] = i;
			}
		}
	}
}

int
tt_pool_peek(const char *dir, struct tt_superblock *sb, const struct tt_log *log)
{
	char path[PATH_MAX];
	bool created;
	int dir_fd, fd, rc;

	rc = data_path(dir, path, sizeof(path));
	if (rc == 0) {
		rc = open_store_dir(dir, false, log, &dir_fd);
	}
	if (rc < 0) {
		return rc;
	}
	fd = open_data_fd(dir_fd, path, false, false, &created, log);
	close(dir_fd);
	if (fd < 0) {
		return fd;
	}
	rc = read_superblock(fd, sb, path, log);
	close(fd);
	if (rc == 1) {
		tt_log_err(log,
		           "%s is empty: no store was ever written here (a process killed while "
		           "creating it leaves this; opening with TUTTI_OPEN_CREATE makes a store "
		           "of it)",
		           path);
		rc = -ENOENT;
	} else if (rc < 0 && rc != -EPROTO) {
		tt_log_err(log, "%s: not a Tutti store, or damaged: %s", path, tutti_strerror(rc));
	} else if (rc == -EPROTO) {
		tt_log_err(log, "%s: not a Tutti store of this version", path);
	}
	return rc;
}
