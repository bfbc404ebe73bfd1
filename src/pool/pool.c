/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File pool: the data files of a store's directories (opening, locking and checking them, then
 * making them what the open decided) and the slot free lists. pool.h says how an open is split
 * so that a failed one writes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "index/index.h"
#include "pool/pool.h"

struct pool_dir {
	int dir_fd; /* the store directory, holding the owner lock (lock_owner) */
	int fd;
	dev_t dev; /* the directory's identity: one directory given twice is refused */
	ino_t ino;
	bool dir_made;     /* created by this open: removed again unless committed */
	bool owner_locked; /* this open holds the directory's owner lock */
	bool created;      /* tutti.data created by this open: removed again unless committed */
	bool empty;        /* the file is empty */
	bool fresh;        /* holds no store: empty, or of a store whose creation never finished */
	bool replaced;     /* held a store of another identity: fresh, emptied at commit */
	struct tt_superblock sb;  /* as found, unless fresh; as written after a commit */
	uint64_t file_bytes;      /* as found */
	struct timespec times[2]; /* access and modification times as found, put back by an undo */
	uint32_t disk_slots;      /* slots with headers on disk that the store keeps */
	char path[PATH_MAX];      /* where the directory is, for the path table and messages */
	uint32_t *free;           /* stack of free local slot ids; top at free[nr_free - 1] */
	uint32_t nr_free;
};

struct tt_pool {
	uint32_t nr_dirs;
	uint32_t slots_per_dir;
	uint64_t slot_bytes;
	bool read_only;
	bool replace;         /* a store of another identity is replaced (conf->replace) */
	bool fresh;           /* a new store: everything is written at commit */
	bool committed;       /* what the open decided is on disk: nothing is undone at close */
	bool paths_stale;     /* the path table does not name where the directories are now */
	uint32_t found_slots; /* an existing store's slots per directory, as found */
	uint64_t set_uid;
	const struct tt_geo *geo;
	uint32_t key_bytes;
	uint8_t ns_fp[TT_NS_FP_BYTES];
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
 * under a second, but the dead owner's last writes and device flushes (durable mode) must end
 * first, and on a busy device they take seconds: the bound is generous, because before it the
 * open has already taken the owner lock, so no live process of this version owns the store. It
 * only runs out when a process of an older Tutti, which locks the data file alone, has the
 * store open.
 */
#define DATA_LOCK_WAIT_MS 30000u
#define DATA_LOCK_POLL_US 2000u

/*
 * Open the store directory (following a symbolic link to a directory, as any path does),
 * creating it when asked (*made says so: a failed open removes it again). The directory's
 * descriptor carries the owner lock and is the base of every path inside the store.
 */
static int
open_store_dir(const char *dir, bool create, const struct tt_log *log, int *out, bool *made)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	*made = false;
	if (fd < 0 && errno == ENOENT && create) {
		if (mkdir(dir, 0700) == 0) {
			*made = true;
		} else if (errno != EEXIST) {
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
 * The owner lock: an flock on the store directory, exclusive for an open that may write, shared
 * for read-only ones (which may look at a store together, never beside a writer). No I/O ring
 * ever sees this descriptor, so the lock goes with the process that holds it, at exit or at a
 * kill, and every step that creates or removes the data file runs under it: two processes
 * creating one store are serialised here, before either touches the file.
 */
static int
lock_owner(int dir_fd, const char *dir, bool shared, const struct tt_log *log)
{
	int rc;

	if (flock(dir_fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) {
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
lock_data_file(int fd, const char *path, bool shared, const struct tt_log *log)
{
	uint64_t t0 = tt_now_ns();
	bool waited = false;

	while (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK) {
			int rc = -errno;

			tt_log_err(log, "%s: locking the data file: %s", path, tutti_strerror(rc));
			return rc;
		}
		if (tt_now_ns() - t0 > (uint64_t)DATA_LOCK_WAIT_MS * TT_NS_PER_MS) {
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
	/* A reader that is to change nothing does not change the access time either, where the
	 * file is its own (O_NOATIME is refused, EPERM, on others' files). */
	int fd = writable ? -1 : openat(dir_fd, TT_POOL_FILE_NAME, flags | O_NOATIME);
	struct stat st;
	int rc;

	if (fd < 0) {
		fd = openat(dir_fd, TT_POOL_FILE_NAME, flags);
	}
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
write_at(int fd, const void *buf, size_t len, uint64_t off)
{
	ssize_t n = pwrite(fd, buf, len, (off_t)off);

	if (n < 0) {
		return -errno;
	}
	return n == (ssize_t)len ? 0 : -EIO;
}

static int
write_superblock(int fd, const struct tt_superblock *sb)
{
	uint8_t *buf = tt_aligned_alloc(TT_SB_BYTES);
	int rc;

	if (buf == NULL) {
		return -ENOMEM;
	}
	tt_sb_encode(sb, buf);
	rc = write_at(fd, buf, TT_SB_BYTES, 0);
	tt_aligned_free(buf);
	/* The superblock is the store's identity; make it durable before any slot refers to it. */
	if (rc == 0 && fdatasync(fd) != 0) {
		rc = -errno;
	}
	return rc;
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
			           "%u: remove the file (a store is a cache: its prefixes are "
			           "computed again) or use another directory",
			           path, (unsigned)buf[8] | (unsigned)buf[9] << 8, TT_SB_VERSION);
		}
	}
	tt_aligned_free(buf);
	return rc;
}

/* 0 if the superblock is of the store asked for, 1 if it is of another one that the open
 * replaces, or -EEXIST. */
static int
sb_matches(const struct tt_pool *pool, const struct tt_superblock *sb, const char *path)
{
	struct tt_geo g;

	if (tt_geo_derive(&sb->geo, &g) != 0 || !tt_geo_equal(&g, pool->geo) ||
	    sb->slot_bytes != pool->geo->slot_bytes || sb->key_bytes != pool->key_bytes ||
	    memcmp(sb->ns_fp, pool->ns_fp, TT_NS_FP_BYTES) != 0 ||
	    sb->data_off != TT_POOL_DATA_OFF) {
		if (pool->replace) {
			return 1;
		}
		tt_log_err(pool->log,
		           "%s holds a store of another geometry, key size or namespace "
		           "(%u layers, %u KV heads, head dim %u, %u-byte keys); use another "
		           "directory or remove the file",
		           path, sb->geo.nr_layers, sb->geo.nr_kv_heads, sb->geo.head_dim,
		           sb->key_bytes);
		return -EEXIST;
	}
	return 0;
}

/* Make the file at least \p bytes long, reserving the space now so that writes never fail for
 * lack of it. */
static int
reserve(int fd, uint64_t bytes, const char *dir, const struct tt_log *log)
{
	int rc;

	/* Not posix_fallocate: its fallback writes single bytes, which O_DIRECT refuses. */
	if (fallocate(fd, 0, 0, (off_t)bytes) == 0) {
		return 0;
	}
	rc = -errno;
	if (rc == -EOPNOTSUPP && ftruncate(fd, (off_t)bytes) == 0) {
		tt_log_warn(log,
		            "%s/%s: no fallocate; the file is sparse and a full disk will show up "
		            "as write errors",
		            dir, TT_POOL_FILE_NAME);
		return 0;
	}
	tt_log_err(log, "%s/%s: cannot reserve %llu bytes: %s", dir, TT_POOL_FILE_NAME,
	           (unsigned long long)bytes, tutti_strerror(rc));
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

/* A fresh random id: a new store's slots are never mistaken for those of an earlier store that
 * held the same file, nor one directory's for another's. */
static int
new_uid(uint64_t *uid)
{
	ssize_t n = getrandom(uid, sizeof(*uid), 0);

	if (n != (ssize_t)sizeof(*uid)) {
		return n < 0 ? -errno : -EIO;
	}
	return 0;
}

/* Where \p dir is, as the path table records it: its canonical path where it can be had (the
 * same however the directory was named), else the name given. */
static void
record_path(const char *dir, char *out)
{
	char *real = realpath(dir, NULL);

	snprintf(out, PATH_MAX, "%s", real != NULL ? real : dir);
	free(real);
}

/* The directory given as number \p d is one given before it: refused, since it would be opened
 * (and locked) twice. */
static int
check_given_once(const struct tt_pool *pool, const struct tt_pool_conf *conf, uint32_t d)
{
	for (uint32_t e = 0; e < d; e++) {
		if (pool->dirs[e].dev == pool->dirs[d].dev &&
		    pool->dirs[e].ino == pool->dirs[d].ino) {
			tt_log_err(pool->log,
			           "%s and %s are one directory: give each directory once",
			           conf->dirs[e], conf->dirs[d]);
			return -EINVAL;
		}
	}
	return 0;
}

/* Open, lock and read the \p d-th directory. Writes nothing. */
static int
open_dir(struct tt_pool *pool, const struct tt_pool_conf *conf, uint32_t d)
{
	struct pool_dir *pd = &pool->dirs[d];
	const char *dir = conf->dirs[d];
	bool create = conf->create && !conf->read_only;
	char path[PATH_MAX];
	struct stat st;
	int rc;

	rc = data_path(dir, path, sizeof(path));
	/* A directory that another open made, then removed again when it failed, may be the one
	 * locked here: locked, it is looked up again. */
	for (int tries = 0; rc == 0 && tries < 3; tries++) {
		if (pd->dir_fd >= 0) {
			close(pd->dir_fd);
			pd->dir_fd = -1;
		}
		rc = open_store_dir(dir, create, pool->log, &pd->dir_fd, &pd->dir_made);
		if (rc == 0 && fstat(pd->dir_fd, &st) != 0) {
			rc = -errno;
		}
		if (rc < 0) {
			return rc;
		}
		record_path(dir, pd->path);
		pd->dev = st.st_dev;
		pd->ino = st.st_ino;
		rc = check_given_once(pool, conf, d);
		if (rc == 0) {
			rc = lock_owner(pd->dir_fd, dir, conf->read_only, pool->log);
		}
		if (rc < 0) {
			return rc;
		}
		pd->owner_locked = true;
		if (fstat(pd->dir_fd, &st) != 0) {
			return -errno;
		}
		if (st.st_nlink > 0) {
			break;
		}
		pd->owner_locked = false;
		rc = tries < 2 ? 0 : -ENOENT;
	}
	if (rc < 0) {
		tt_log_err(pool->log, "%s: removed again and again while being opened", dir);
		return rc;
	}
	pd->fd = open_data_fd(pd->dir_fd, path, !conf->read_only, create, &pd->created, pool->log);
	if (pd->fd < 0) {
		rc = pd->fd;
		pd->fd = -1;
		return rc;
	}
	pool->fds[d] = pd->fd;
	rc = lock_data_file(pd->fd, path, conf->read_only, pool->log);
	if (rc == 0) {
		rc = check_dio_alignment(pd->fd, path, pool->log);
	}
	if (rc == 0 && fstat(pd->fd, &st) != 0) {
		rc = -errno;
	}
	if (rc < 0) {
		return rc;
	}
	pd->file_bytes = (uint64_t)st.st_size;
	pd->times[0] = st.st_atim;
	pd->times[1] = st.st_mtim;
	rc = read_superblock(pd->fd, &pd->sb, path, pool->log);
	if (rc == -EINVAL) {
		tt_log_err(pool->log, "%s: O_DIRECT reads fail on this filesystem", path);
		return -EOPNOTSUPP; /* an O_DIRECT read refused despite the open succeeding */
	}
	if (rc < 0) {
		tt_log_err(pool->log, "%s: not a Tutti store or damaged superblock: %s", path,
		           tutti_strerror(rc));
		return rc;
	}
	pd->empty = rc == 1;
	return 0;
}

/* ---- what the directories given are ---- */

/* The path table as directory \p pd holds it: entry i into paths[i] ("" where it does not
 * decode), for a store of \p nr directories. */
static void
read_paths(const struct tt_pool *pool, const struct pool_dir *pd, uint32_t nr,
           char (*paths)[PATH_MAX])
{
	uint8_t *buf = tt_aligned_alloc((size_t)nr * TT_SB_PATH_BYTES);
	ssize_t n =
	    buf == NULL ? -1 : pread(pd->fd, buf, (size_t)nr * TT_SB_PATH_BYTES, TT_SB_PATHS_OFF);

	for (uint32_t i = 0; i < nr; i++) {
		size_t at = (size_t)i * TT_SB_PATH_BYTES;

		if (n < (ssize_t)(at + TT_SB_PATH_BYTES) ||
		    tt_sb_path_decode(buf + at, TT_SB_PATH_BYTES, pool->set_uid, i, paths[i],
		                      PATH_MAX) != 0) {
			paths[i][0] = '\0';
		}
	}
	tt_aligned_free(buf);
}

/* Refuse a list that holds only part of the store, naming what is missing. */
static int
report_missing(struct tt_pool *pool, const struct tt_pool_conf *conf, const struct pool_dir *ref,
               const bool *seen)
{
	uint32_t nr = ref->sb.nr_dirs;
	char(*paths)[PATH_MAX] = tt_calloc(nr, sizeof(*paths));
	char msg[1024];
	size_t len = 0;

	if (paths == NULL) {
		return -ENOMEM;
	}
	read_paths(pool, ref, nr, paths);
	for (uint32_t i = 0; i < nr && len < sizeof(msg); i++) {
		if (!seen[i]) {
			len +=
			    (size_t)snprintf(msg + len, sizeof(msg) - len,
			                     "%s%u (last opened as %s)", len > 0 ? ", " : "", i + 1,
			                     paths[i][0] != '\0' ? paths[i] : "an unknown path");
		}
	}
	tt_log_err(pool->log,
	           "%s holds directory %u of a store of %u directories, of which %u %s given: "
	           "missing %s %s. Give every directory of the store (in any order); if one is "
	           "lost for good, remove tutti.data from each of the others to start an empty "
	           "store",
	           ref->path, ref->sb.dir_index + 1, nr, conf->nr_dirs,
	           conf->nr_dirs == 1 ? "was" : "were",
	           nr - conf->nr_dirs == 1 ? "directory" : "directories", msg);
	tt_free(paths);
	return -ENOENT;
}

/*
 * The directories given hold no store: a new one is made in them at commit (dirs[d] becomes
 * directory d of the set). Only its ids are drawn now.
 */
static int
plan_new_store(struct tt_pool *pool, const struct tt_pool_conf *conf)
{
	int rc = new_uid(&pool->set_uid);

	pool->fresh = true;
	pool->slots_per_dir = (uint32_t)conf->slots_per_dir;
	for (uint32_t d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		rc = new_uid(&pool->dirs[d].sb.store_uid);
	}
	return rc;
}

/*
 * The directories given hold a store: they must be all of its directories and nothing else.
 * Then its size: as found (the largest any superblock gives: a resize interrupted between two
 * directories' superblocks leaves some with the old count, while every file already has the
 * larger size), or as asked.
 */
static int
plan_existing_store(struct tt_pool *pool, const struct tt_pool_conf *conf,
                    const struct pool_dir *ref)
{
	bool seen[TT_SB_MAX_DIRS] = {false};
	uint32_t by_index[TT_SB_MAX_DIRS];
	uint64_t found = ref->sb.nr_slots;
	bool uneven = false;
	char(*paths)[PATH_MAX];

	pool->set_uid = ref->sb.set_uid;
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		const struct pool_dir *pd = &pool->dirs[d];

		if (pd->fresh) {
			tt_log_err(
			    pool->log,
			    "%s holds no store, while %s holds directory %u of a store of %u "
			    "directories: a store's directories are fixed when it is made. Give "
			    "exactly its directories, or remove tutti.data from each of them to "
			    "make a new store over these",
			    conf->dirs[d], ref->path, ref->sb.dir_index + 1, ref->sb.nr_dirs);
			return -EINVAL;
		}
		if (pd->sb.set_uid != ref->sb.set_uid || pd->sb.nr_dirs != ref->sb.nr_dirs) {
			tt_log_err(pool->log,
			           "%s and %s hold two different stores: give the directories "
			           "of one",
			           ref->path, pd->path);
			return -EEXIST;
		}
		if (seen[pd->sb.dir_index]) {
			tt_log_err(
			    pool->log,
			    "%s and %s both hold directory %u of one store (a copy of a data "
			    "file?): give each directory of the store once",
			    pool->dirs[by_index[pd->sb.dir_index]].path, pd->path,
			    pd->sb.dir_index + 1);
			return -EINVAL;
		}
		seen[pd->sb.dir_index] = true;
		by_index[pd->sb.dir_index] = d;
		uneven |= pd->sb.nr_slots != ref->sb.nr_slots;
		found = TT_MAX(found, pd->sb.nr_slots);
	}
	if (pool->nr_dirs < ref->sb.nr_dirs) {
		return report_missing(pool, conf, ref, seen);
	}
	if (uneven) {
		tt_log_warn(pool->log,
		            "the directories of the store in %s give different sizes (a resize "
		            "was interrupted): taking %llu slots per directory",
		            ref->path, (unsigned long long)found);
	}
	if (found == 0 || found * pool->nr_dirs >= TT_NO_SLOT) {
		tt_log_err(pool->log, "the store in %s has %llu slots per directory: too many",
		           ref->path, (unsigned long long)found);
		return -EINVAL;
	}
	pool->found_slots = (uint32_t)found;
	pool->slots_per_dir = (uint32_t)found;
	if (!conf->keep_slots && !conf->read_only) {
		pool->slots_per_dir = (uint32_t)conf->slots_per_dir;
	}
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];
		/* Slots that start inside the file: a slot cut by a truncation is read too, and
		 * its header or payload found damaged as any other. */
		uint64_t in_file =
		    pd->file_bytes > TT_POOL_DATA_OFF
		        ? (pd->file_bytes - TT_POOL_DATA_OFF + pool->slot_bytes - 1) /
		              pool->slot_bytes
		        : 0;

		pd->disk_slots = (uint32_t)TT_MIN(TT_MIN(in_file, pd->sb.nr_slots),
		                                  (uint64_t)pool->slots_per_dir);
	}
	/* Is the path table still right? */
	paths = tt_calloc(ref->sb.nr_dirs, sizeof(*paths));
	if (paths == NULL) {
		return -ENOMEM;
	}
	read_paths(pool, ref, ref->sb.nr_dirs, paths);
	for (uint32_t i = 0; i < ref->sb.nr_dirs; i++) {
		pool->paths_stale |= strcmp(paths[i], pool->dirs[by_index[i]].path) != 0;
	}
	tt_free(paths);
	return 0;
}

/*
 * What the directories given hold. A store whose creation never finished (some directory still
 * has TT_SB_CREATING) never had a successful open, so nothing was stored in it: its directories
 * count as holding no store, and TUTTI_OPEN_CREATE makes it anew.
 */
static int
plan_store(struct tt_pool *pool, const struct tt_pool_conf *conf)
{
	bool create = conf->create && !conf->read_only;

	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		const struct pool_dir *pd = &pool->dirs[d];

		pool->dirs[d].fresh |= pd->empty;
		for (uint32_t e = 0;
		     !pd->empty && (pd->sb.flags & TT_SB_CREATING) && e < pool->nr_dirs; e++) {
			pool->dirs[e].fresh |=
			    !pool->dirs[e].empty && pool->dirs[e].sb.set_uid == pd->sb.set_uid;
		}
	}
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		const struct pool_dir *pd = &pool->dirs[d];

		if (pd->fresh && !create) {
			tt_log_err(pool->log,
			           pd->empty
			               ? "%s/%s is empty: no store was ever written here (open "
			                 "with TUTTI_OPEN_CREATE to make one)"
			               : "%s/%s holds a store whose creation never finished: "
			                 "nothing was stored in it (open with TUTTI_OPEN_CREATE "
			                 "to make it anew)",
			           conf->dirs[d], TT_POOL_FILE_NAME);
			return -ENOENT;
		}
		if (!pd->fresh) {
			char path[PATH_MAX];
			int rc = data_path(conf->dirs[d], path, sizeof(path));

			rc = rc < 0 ? rc : sb_matches(pool, &pd->sb, path);
			if (rc < 0) {
				return rc;
			}
			/* Another store's: a new one is made here at commit. */
			pool->dirs[d].replaced = rc == 1;
			pool->dirs[d].fresh |= rc == 1;
		}
	}
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		if (!pool->dirs[d].fresh) {
			return plan_existing_store(pool, conf, &pool->dirs[d]);
		}
	}
	return plan_new_store(pool, conf);
}

/* ---- pool ---- */

int
tt_pool_open(const struct tt_pool_conf *conf, struct tt_pool **out)
{
	struct tt_pool *pool;
	int rc;

	*out = NULL;
	if (conf->nr_dirs == 0 || conf->nr_dirs > TT_POOL_MAX_DIRS ||
	    (conf->slots_per_dir == 0 && !conf->keep_slots) ||
	    conf->slots_per_dir * conf->nr_dirs >= UINT32_MAX ||
	    (conf->create && conf->read_only)) {
		return -EINVAL;
	}
	pool = tt_calloc(1, sizeof(*pool));
	if (pool == NULL) {
		return -ENOMEM;
	}
	pool->nr_dirs = conf->nr_dirs;
	pool->slot_bytes = conf->geo->slot_bytes;
	pool->read_only = conf->read_only;
	pool->replace = conf->replace;
	pool->geo = conf->geo;
	pool->key_bytes = conf->key_bytes;
	memcpy(pool->ns_fp, conf->ns_fp, TT_NS_FP_BYTES);
	pool->log = conf->log;
	pool->fds = tt_calloc(conf->nr_dirs, sizeof(*pool->fds));
	pool->dirs = tt_calloc(conf->nr_dirs, sizeof(*pool->dirs));
	if (pool->fds == NULL || pool->dirs == NULL) {
		tt_pool_close(pool);
		return -ENOMEM;
	}
	for (uint32_t d = 0; d < conf->nr_dirs; d++) {
		pool->dirs[d].fd = pool->fds[d] = pool->dirs[d].dir_fd = -1;
	}
	rc = 0;
	for (uint32_t d = 0; rc == 0 && d < conf->nr_dirs; d++) {
		rc = open_dir(pool, conf, d);
	}
	if (rc == 0) {
		rc = plan_store(pool, conf);
	}
	for (uint32_t d = 0; rc == 0 && d < conf->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		pd->free = tt_malloc((size_t)pool->slots_per_dir * sizeof(*pd->free));
		if (pd->free == NULL) {
			rc = -ENOMEM;
			break;
		}
		/* Pushed in reverse so that allocation walks the file from its start. */
		for (uint32_t i = 0; i < pool->slots_per_dir; i++) {
			pd->free[i] = pool->slots_per_dir - 1 - i;
		}
		pd->nr_free = pool->slots_per_dir;
	}
	if (rc < 0) {
		tt_pool_close(pool);
		return rc;
	}
	*out = pool;
	return 0;
}

/* Write the whole path table into directory \p pd's file. */
static int
write_paths(const struct tt_pool *pool, const struct pool_dir *pd)
{
	uint32_t nr = pool->nr_dirs;
	uint8_t *buf = tt_aligned_alloc((size_t)nr * TT_SB_PATH_BYTES);
	int rc;

	if (buf == NULL) {
		return -ENOMEM;
	}
	for (uint32_t d = 0; d < nr; d++) {
		const struct pool_dir *member = &pool->dirs[d];

		tt_sb_path_encode(pool->set_uid, member->sb.dir_index, member->path,
		                  buf + (size_t)member->sb.dir_index * TT_SB_PATH_BYTES);
	}
	rc = write_at(pd->fd, buf, (size_t)nr * TT_SB_PATH_BYTES, TT_SB_PATHS_OFF);
	tt_aligned_free(buf);
	return rc;
}

/* The superblock of the \p d-th directory of a new store. */
static void
new_superblock(const struct tt_pool *pool, uint32_t d, struct tt_superblock *sb)
{
	uint64_t uid = pool->dirs[d].sb.store_uid;

	memset(sb, 0, sizeof(*sb));
	sb->version = TT_SB_VERSION;
	sb->geo = pool->geo->g;
	sb->key_bytes = pool->key_bytes;
	memcpy(sb->ns_fp, pool->ns_fp, TT_NS_FP_BYTES);
	sb->slot_bytes = pool->slot_bytes;
	sb->data_off = TT_POOL_DATA_OFF;
	sb->nr_slots = pool->slots_per_dir;
	sb->store_uid = uid;
	sb->set_uid = pool->set_uid;
	sb->nr_dirs = pool->nr_dirs;
	sb->dir_index = d;
	sb->flags = TT_SB_CREATING;
}

/*
 * A new store: every directory gets its superblock marked as being created, its size and the
 * path table; only when all have them is each superblock written again without the mark. A
 * process killed in between leaves files that say their creation never finished (opened again
 * with TUTTI_OPEN_CREATE, they are made anew), never a store with some directories missing.
 */
static int
make_new_store(struct tt_pool *pool)
{
	uint64_t bytes = TT_POOL_DATA_OFF + (uint64_t)pool->slots_per_dir * pool->slot_bytes;
	uint32_t d;
	int rc = 0;

	for (d = 0; d < pool->nr_dirs; d++) {
		const struct tt_superblock *old = &pool->dirs[d].sb;

		if (pool->dirs[d].replaced) {
			tt_log_warn(
			    pool->log,
			    "%s/%s held a store of another geometry, key size or namespace (%u "
			    "layers, %u KV heads, head dim %u, %u-byte keys): replaced by an "
			    "empty store",
			    pool->dirs[d].path, TT_POOL_FILE_NAME, old->geo.nr_layers,
			    old->geo.nr_kv_heads, old->geo.head_dim, old->key_bytes);
		}
		new_superblock(pool, d, &pool->dirs[d].sb);
	}
	for (d = 0; d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		/* A file someone else made empty (touch, a copy) gets the mode of one made here. */
		rc = pd->created || fchmod(pd->fd, 0600) == 0 ? 0 : -errno;
		/* A replaced store's slots go first: its headers are not met again. */
		if (rc == 0 && pd->replaced && ftruncate(pd->fd, 0) != 0) {
			rc = -errno;
		}
		if (rc == 0) {
			rc = write_superblock(pd->fd, &pd->sb);
		}
		if (rc == 0 && pd->file_bytes > bytes && ftruncate(pd->fd, (off_t)bytes) != 0) {
			rc = -errno;
		}
		if (rc == 0) {
			rc = reserve(pd->fd, bytes, pd->path, pool->log);
		}
		if (rc == 0) {
			rc = write_paths(pool, pd);
		}
		if (rc < 0) {
			break;
		}
	}
	for (d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		pool->dirs[d].sb.flags = 0;
		rc = write_superblock(pool->dirs[d].fd, &pool->dirs[d].sb);
		if (rc < 0) {
			break;
		}
	}
	if (rc < 0) {
		tt_log_err(pool->log, "%s: cannot create the store: %s", pool->dirs[d].path,
		           tutti_strerror(rc));
		/* Back to files holding nothing (the ones created here go at close). */
		for (uint32_t e = 0; e < pool->nr_dirs; e++) {
			if (!pool->dirs[e].created && ftruncate(pool->dirs[e].fd, 0) != 0) {
				tt_log_warn(pool->log, "%s: cannot empty the file again: %s",
				            pool->dirs[e].path, tutti_strerror(-errno));
			}
		}
		return rc;
	}
	tt_log_info(pool->log, "created a store of %u directories, %u slots each", pool->nr_dirs,
	            pool->slots_per_dir);
	return 0;
}

/*
 * An existing store: grow files first (extend every file that needs it; on failure, cut them
 * back), then the superblocks, then shrink; a process killed in between leaves superblocks that
 * disagree over files that are all large enough, which the next open resolves (plan_existing_
 * store). The path table is rewritten where it names other paths.
 */
static int
update_store(struct tt_pool *pool)
{
	uint64_t bytes = TT_POOL_DATA_OFF + (uint64_t)pool->slots_per_dir * pool->slot_bytes;
	uint32_t d;
	int rc = 0;

	if (pool->slots_per_dir != pool->found_slots) {
		tt_log_warn(
		    pool->log,
		    "the store in %s%s is resized from %u to %u slots per directory, as its "
		    "capacity asks%s",
		    pool->dirs[0].path, pool->nr_dirs > 1 ? " and the others" : "",
		    pool->found_slots, pool->slots_per_dir,
		    pool->slots_per_dir < pool->found_slots
		        ? ": the chunks in the slots cut off are dropped"
		        : "");
	}
	for (d = 0; rc == 0 && pool->paths_stale && d < pool->nr_dirs; d++) {
		rc = write_paths(pool, &pool->dirs[d]);
	}
	for (d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		if (pd->file_bytes < bytes) {
			if (pd->sb.nr_slots == pool->slots_per_dir) {
				tt_log_warn(pool->log,
				            "%s/%s is shorter than its %u slots (cut by something "
				            "else): extended; what was cut off is gone",
				            pd->path, TT_POOL_FILE_NAME, pool->slots_per_dir);
			}
			rc = reserve(pd->fd, bytes, pd->path, pool->log);
		}
	}
	if (rc < 0) {
		/* Back to the sizes (and times) found: the open fails as if never tried. */
		for (uint32_t e = 0; e < d; e++) {
			struct pool_dir *pd = &pool->dirs[e];

			if (pd->file_bytes < bytes &&
			    ftruncate(pd->fd, (off_t)pd->file_bytes) == 0) {
				futimens(pd->fd, pd->times);
			}
		}
		return rc;
	}
	for (d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		if (pd->sb.nr_slots != pool->slots_per_dir) {
			pd->sb.nr_slots = pool->slots_per_dir;
			rc = write_superblock(pd->fd, &pd->sb);
		}
	}
	for (d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		if (pool->dirs[d].file_bytes > bytes &&
		    ftruncate(pool->dirs[d].fd, (off_t)bytes) != 0) {
			rc = -errno;
		}
	}
	if (rc < 0) {
		tt_log_err(pool->log, "%s: cannot resize the store: %s", pool->dirs[0].path,
		           tutti_strerror(rc));
	}
	return rc;
}

int
tt_pool_commit(struct tt_pool *pool)
{
	int rc = 0;

	if (!pool->read_only) {
		rc = pool->fresh ? make_new_store(pool) : update_store(pool);
	}
	pool->committed = rc == 0;
	return rc;
}

void
tt_pool_close(struct tt_pool *pool)
{
	if (pool == NULL) {
		return;
	}
	for (uint32_t d = 0; pool->dirs != NULL && d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		/* A failed open leaves no file behind, however large: each was created by this
		 * open under the owner lock, which is still held. */
		if (!pool->committed && pd->created) {
			unlinkat(pd->dir_fd, TT_POOL_FILE_NAME, 0);
		}
		if (pd->fd >= 0) {
			/* Unlock explicitly: another reference to the open file (an I/O ring being
			 * torn down) must not keep the store locked after close. */
			flock(pd->fd, LOCK_UN);
			close(pd->fd);
		}
		/* Nor the directory it made, when it holds its lock (rmdir removes only an empty
		 * one; an opener that locks it next finds it gone and looks it up again). */
		if (!pool->committed && pd->dir_made && pd->owner_locked) {
			rmdir(pd->path);
		}
		/* The owner lock last: the data file is released before another opener may go. */
		if (pd->dir_fd >= 0) {
			close(pd->dir_fd);
		}
		tt_free(pd->free);
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
	return pool->dirs[dir].sb.store_uid;
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

uint32_t
tt_pool_disk_slots(const struct tt_pool *pool, uint32_t dir)
{
	return pool->dirs[dir].disk_slots;
}

uint64_t
tt_pool_file_bytes(const struct tt_pool *pool, uint32_t dir)
{
	return pool->dirs[dir].file_bytes;
}

bool
tt_pool_read_only(const struct tt_pool *pool)
{
	return pool->read_only;
}

int
tt_pool_peek(const char *dir, struct tt_superblock *sb, const struct tt_log *log)
{
	char path[PATH_MAX];
	bool created, made;
	int dir_fd, fd, rc;

	rc = data_path(dir, path, sizeof(path));
	if (rc == 0) {
		rc = open_store_dir(dir, false, log, &dir_fd, &made);
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
