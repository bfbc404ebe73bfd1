/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File pool: the data files of a store's directories (opening, locking and checking them, then
 * making them what the open decided) and the slot free lists. pool.h says how an open is split
 * so that a failed one writes nothing.
 *
 * Each directory holds nr_files data files: tutti.data (file 0: the superblock the store's size
 * is read from, the path table) and its siblings tutti.data.1, ... Local slot l of a directory
 * lives in its file l % nr_files, row l / nr_files, so that consecutive slots (those one save
 * fills) are written through different files: a filesystem that serialises writers of one file
 * (tmpfs, on its inode lock) lets them run side by side.
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

/* One data file of a directory. */
struct pool_file {
	int fd;
	bool created;             /* created by this open: removed again unless committed */
	bool empty;               /* the file is empty */
	struct tt_superblock sb;  /* as found, unless empty or its directory fresh; as written
	                           * after a commit */
	uint64_t file_bytes;      /* as found */
	struct timespec times[2]; /* access and modification times as found, put back by an undo */
};

struct pool_dir {
	int dir_fd; /* the store directory, holding the owner lock (lock_owner) */
	dev_t dev;  /* the directory's identity: one directory given twice is refused */
	ino_t ino;
	bool dir_made;     /* created by this open: removed again unless committed */
	bool owner_locked; /* this open holds the directory's owner lock */
	bool fresh;        /* holds no store: empty, or of a store whose creation never finished */
	bool replaced;     /* held a store of another identity: fresh, emptied at commit */
	/* files[0] (tutti.data) is opened first; the siblings once the store's plan says how
	 * many it has. nr_open entries are set up (fd -1 where not opened). */
	struct pool_file *files;
	uint32_t nr_open;
	uint32_t kept_slots; /* slots whose headers the store keeps (recovery reads these) */
	char path[PATH_MAX]; /* where the directory is, for the path table and messages */
	uint32_t *free;      /* stack of free local slot ids; top at free[nr_free - 1] */
	uint32_t nr_free;
};

struct tt_pool {
	uint32_t nr_dirs;
	uint32_t slots_per_dir;
	uint32_t files_per_dir; /* decided by the plan: the store's, or conf's for a new one */
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
	int *fds; /* nr_dirs x files_per_dir, once every file is open */
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
	const int flags = O_RDONLY | O_DIRECTORY;
	int fd = tt_open_kind(AT_FDCWD, dir, flags, 0, TT_KIND_DIR, -ENOTDIR, dir, log);

	*made = false;
	if (fd == -ENOENT && create) {
		if (mkdir(dir, 0700) == 0) {
			*made = true;
		} else if (errno != EEXIST) {
			int rc = -errno;

			tt_log_err(log, "cannot create store directory %s: %s", dir,
			           tutti_strerror(rc));
			return rc;
		}
		fd = tt_open_kind(AT_FDCWD, dir, flags, 0, TT_KIND_DIR, -ENOTDIR, dir, log);
	}
	if (fd == -ENOTDIR) {
		return fd; /* logged: what stands there instead */
	}
	if (fd < 0) {
		tt_log_err(log, "%s: %s", dir, tutti_strerror(fd));
		return fd;
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
 * Open (or, with \p create, create) the data file \p name in the directory \p dir_fd (\p path
 * names it in messages) without following a symbolic link and without blocking, and only if it
 * is a regular file (tt_open_kind: a FIFO in its place would block an open for reading until a
 * writer came; a device, a socket or a directory is not a store either: -EPROTO); when
 * \p writable, also that it has no other hard link, whose file every write of the store would
 * change too. *created says whether this call created it. Returns the descriptor or -errno,
 * having logged why.
 */
static int
open_data_fd(int dir_fd, const char *name, const char *path, bool writable, bool create,
             bool *created, const struct tt_log *log)
{
	int flags = (writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_NOFOLLOW;
	/* A reader that is to change nothing does not change the access time either, where the
	 * file is its own (O_NOATIME is refused, EPERM, on others' files). */
	int fd = writable ? -1
	                  : tt_open_kind(dir_fd, name, flags | O_NOATIME, 0, TT_KIND_FILE, -EPROTO,
	                                 path, log);
	struct stat st;
	int rc;

	if (fd < 0 && fd != -EPROTO) {
		fd = tt_open_kind(dir_fd, name, flags, 0, TT_KIND_FILE, -EPROTO, path, log);
	}
	*created = false;
	if (fd == -ENOENT && create) {
		fd = tt_open_kind(dir_fd, name, flags | O_CREAT | O_EXCL, 0600, TT_KIND_FILE,
		                  -EPROTO, path, log);
		*created = fd >= 0;
		if (fd == -EEXIST) {
			/* Made meanwhile by a process that does not take the owner lock (an older
			 * build): it is not ours to initialise or remove, only to open. */
			fd = tt_open_kind(dir_fd, name, flags, 0, TT_KIND_FILE, -EPROTO, path, log);
		}
	}
	if (fd == -EPROTO) {
		return fd; /* logged: what stands there instead */
	}
	if (fd < 0) {
		rc = fd == -EINVAL ? -EOPNOTSUPP : fd;
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
	if (writable && st.st_nlink != 1) {
		tt_log_err(log,
		           "%s has %ju hard links: the store would also write the file of every "
		           "other name; remove the other links",
		           path, (uintmax_t)st.st_nlink);
		rc = -EMLINK;
		goto err;
	}
	return fd;

err:
	close(fd);
	if (*created) {
		unlinkat(dir_fd, name, 0);
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

/*
 * Read the superblock; 1 if the file is empty (a new store), 0 if read, or -errno. A superblock
 * that does not decode is logged as what it is: no Tutti magic (-EPROTO), an intact superblock
 * of another format version (-EPROTO: sealed by its checksum under the rule every version
 * keeps, so a damaged version field is not taken for one), or damage (-EBADMSG). A repair
 * cannot mend a superblock: the open fails before anything is written, every time alike.
 */
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
	}
	if (rc == -EPROTO && memcmp(buf, TT_SB_MAGIC, 8) == 0) {
		tt_log_err(log,
		           "%s: a store of format version %u; this build reads version %u: remove "
		           "the file (a store is a cache: its prefixes are computed again) or use "
		           "another directory",
		           path, (unsigned)buf[8] | (unsigned)buf[9] << 8, TT_SB_VERSION);
	} else if (rc == -EPROTO) {
		tt_log_err(log,
		           "%s: not a Tutti store (no Tutti magic at its start): left as it is",
		           path);
	} else if (rc == -EBADMSG) {
		tt_log_err(
		    log,
		    "%s: damaged superblock (it fails its checksum, is cut short or holds "
		    "values no writer makes): the store cannot be opened, and a repair "
		    "cannot mend it (it changes nothing); remove tutti.data in its directory "
		    "to make a new, empty store there (a store is a cache: its prefixes are "
		    "computed again)",
		    path);
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
 * lack of it: its first \p head bytes (superblock, path table) and its slots. The gap between
 * them is never read or written: it stays a hole, so that a directory's many files cost no
 * more space than their slots. */
static int
reserve(int fd, uint64_t head, uint64_t bytes, const char *path, const struct tt_log *log)
{
	struct stat st;
	int rc = 0;

	/* Not posix_fallocate: its fallback writes single bytes, which O_DIRECT refuses. */
	if (fallocate(fd, 0, 0, (off_t)head) != 0 ||
	    (bytes > TT_POOL_DATA_OFF &&
	     fallocate(fd, 0, TT_POOL_DATA_OFF, (off_t)(bytes - TT_POOL_DATA_OFF)) != 0)) {
		rc = -errno;
	}
	if (rc == -EOPNOTSUPP) {
		tt_log_warn(log,
		            "%s: no fallocate; the file is sparse and a full disk will show up as "
		            "write errors",
		            path);
		rc = 0;
	}
	if (rc == 0 && fstat(fd, &st) != 0) {
		rc = -errno;
	}
	if (rc == 0 && (uint64_t)st.st_size < bytes && ftruncate(fd, (off_t)bytes) != 0) {
		rc = -errno;
	}
	if (rc < 0) {
		tt_log_err(log, "%s: cannot reserve %llu bytes: %s", path,
		           (unsigned long long)bytes, tutti_strerror(rc));
	}
	return rc;
}

int
tt_pool_file_name(uint32_t index, char *name, size_t len)
{
	int n = index == 0 ? snprintf(name, len, "%s", TT_POOL_FILE_NAME)
	                   : snprintf(name, len, "%s.%u", TT_POOL_FILE_NAME, index);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The path of file \p index of directory \p dir, for messages and peeking. */
static int
file_path(const char *dir, uint32_t index, char *path, size_t len)
{
	char name[TT_POOL_NAME_BYTES];
	int rc = tt_pool_file_name(index, name, sizeof(name));

	if (rc == 0 && snprintf(path, len, "%s/%s", dir, name) >= (int)len) {
		rc = -ENAMETOOLONG;
	}
	return rc;
}

static int
data_path(const char *dir, char *path, size_t len)
{
	return file_path(dir, 0, path, len);
}

/* Rows (slots) of file \p f of a directory of \p slots slots spread over \p nr_files files. */
static uint64_t
file_rows(uint64_t slots, uint32_t nr_files, uint32_t f)
{
	return slots / nr_files + (f < slots % nr_files);
}

/* The bytes before the slots that file \p f uses: its superblock and, in file 0, the path
 * table. */
static uint64_t
head_bytes(const struct tt_pool *pool, uint32_t f)
{
	return TT_SB_BYTES + (f == 0 ? (uint64_t)pool->nr_dirs * TT_SB_PATH_BYTES : 0);
}

/* The size file \p f of each directory has at the pool's size. */
static uint64_t
file_size(const struct tt_pool *pool, uint32_t f)
{
	return TT_POOL_DATA_OFF +
	       file_rows(pool->slots_per_dir, pool->files_per_dir, f) * pool->slot_bytes;
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

/*
 * Open, lock and size file \p f of directory \p pd (given as \p dir), creating it when
 * \p create, and read its superblock when \p read_sb. Writes nothing.
 */
static int
open_file(struct tt_pool *pool, struct pool_dir *pd, const char *dir, uint32_t f, bool create,
          bool read_sb)
{
	struct pool_file *pf = &pd->files[f];
	char name[TT_POOL_NAME_BYTES], path[PATH_MAX];
	struct stat st;
	int rc = tt_pool_file_name(f, name, sizeof(name));

	if (rc == 0) {
		rc = file_path(dir, f, path, sizeof(path));
	}
	if (rc < 0) {
		return rc;
	}
	pf->fd =
	    open_data_fd(pd->dir_fd, name, path, !pool->read_only, create, &pf->created, pool->log);
	if (pf->fd < 0) {
		rc = pf->fd;
		pf->fd = -1;
		return rc;
	}
	rc = lock_data_file(pf->fd, path, pool->read_only, pool->log);
	if (rc == 0) {
		rc = check_dio_alignment(pf->fd, path, pool->log);
	}
	if (rc == 0 && fstat(pf->fd, &st) != 0) {
		rc = -errno;
	}
	if (rc < 0) {
		return rc;
	}
	pf->file_bytes = (uint64_t)st.st_size;
	pf->times[0] = st.st_atim;
	pf->times[1] = st.st_mtim;
	pf->empty = st.st_size == 0;
	if (!read_sb) {
		return 0;
	}
	rc = read_superblock(pf->fd, &pf->sb, path, pool->log);
	if (rc == -EINVAL) {
		tt_log_err(pool->log, "%s: O_DIRECT reads fail on this filesystem", path);
		return -EOPNOTSUPP; /* an O_DIRECT read refused despite the open succeeding */
	}
	if (rc < 0) {
		if (rc != -EPROTO && rc != -EBADMSG) { /* those are logged as what they are */
			tt_log_err(pool->log, "%s: reading the superblock: %s", path,
			           tutti_strerror(rc));
		}
		return rc;
	}
	pf->empty = rc == 1;
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
	return open_file(pool, pd, dir, 0, create, true);
}

/* ---- what the directories given are ---- */

/* The path table as directory \p pd holds it: entry i into paths[i] ("" where it does not
 * decode), for a store of \p nr directories. */
static void
read_paths(const struct tt_pool *pool, const struct pool_dir *pd, uint32_t nr,
           char (*paths)[PATH_MAX])
{
	uint8_t *buf = tt_aligned_alloc((size_t)nr * TT_SB_PATH_BYTES);
	ssize_t n = buf == NULL ? -1
	                        : pread(pd->files[0].fd, buf, (size_t)nr * TT_SB_PATH_BYTES,
	                                TT_SB_PATHS_OFF);

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
	uint32_t nr = ref->files[0].sb.nr_dirs;
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
	           ref->path, ref->files[0].sb.dir_index + 1, nr, conf->nr_dirs,
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
	/* Enough files that a save's writers rarely meet in one, within the store's budget of
	 * files; never more files than slots. */
	pool->files_per_dir =
	    conf->files_per_dir != 0
	        ? conf->files_per_dir
	        : (uint32_t)TT_MAX(
	              1u, TT_MIN(TT_MIN(TT_POOL_FILES_PER_DIR, TT_POOL_MAX_FILES / pool->nr_dirs),
	                         conf->slots_per_dir));
	for (uint32_t d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		rc = new_uid(&pool->dirs[d].files[0].sb.store_uid);
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
	uint64_t found = ref->files[0].sb.nr_slots;
	bool uneven = false;
	char(*paths)[PATH_MAX];

	pool->set_uid = ref->files[0].sb.set_uid;
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		const struct pool_dir *pd = &pool->dirs[d];

		if (pd->fresh) {
			tt_log_err(
			    pool->log,
			    "%s holds no store, while %s holds directory %u of a store of %u "
			    "directories: a store's directories are fixed when it is made. Give "
			    "exactly its directories, or remove tutti.data from each of them to "
			    "make a new store over these",
			    conf->dirs[d], ref->path, ref->files[0].sb.dir_index + 1,
			    ref->files[0].sb.nr_dirs);
			return -EINVAL;
		}
		if (pd->files[0].sb.set_uid != ref->files[0].sb.set_uid ||
		    pd->files[0].sb.nr_dirs != ref->files[0].sb.nr_dirs) {
			tt_log_err(pool->log,
			           "%s and %s hold two different stores: give the directories "
			           "of one",
			           ref->path, pd->path);
			return -EEXIST;
		}
		if (seen[pd->files[0].sb.dir_index]) {
			tt_log_err(
			    pool->log,
			    "%s and %s both hold directory %u of one store (a copy of a data "
			    "file?): give each directory of the store once",
			    pool->dirs[by_index[pd->files[0].sb.dir_index]].path, pd->path,
			    pd->files[0].sb.dir_index + 1);
			return -EINVAL;
		}
		seen[pd->files[0].sb.dir_index] = true;
		by_index[pd->files[0].sb.dir_index] = d;
		uneven |= pd->files[0].sb.nr_slots != ref->files[0].sb.nr_slots;
		found = TT_MAX(found, pd->files[0].sb.nr_slots);
	}
	if (pool->nr_dirs < ref->files[0].sb.nr_dirs) {
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

		if (pd->files[0].sb.nr_files != ref->files[0].sb.nr_files) {
			tt_log_err(pool->log,
			           "%s and %s disagree on how many data files each directory has "
			           "(%u and %u): damaged superblocks",
			           ref->path, pd->path, ref->files[0].sb.nr_files,
			           pd->files[0].sb.nr_files);
			return -EBADMSG;
		}
		pd->kept_slots =
		    (uint32_t)TT_MIN(pd->files[0].sb.nr_slots, (uint64_t)pool->slots_per_dir);
	}
	pool->files_per_dir = ref->files[0].sb.nr_files;
	if ((uint64_t)pool->files_per_dir * pool->nr_dirs > TT_POOL_MAX_FILES) {
		tt_log_err(pool->log,
		           "the store in %s has %u directories of %u data files: more than the "
		           "%u files a store may have",
		           ref->path, pool->nr_dirs, pool->files_per_dir, TT_POOL_MAX_FILES);
		return -EINVAL;
	}
	/* Is the path table still right? */
	paths = tt_calloc(ref->files[0].sb.nr_dirs, sizeof(*paths));
	if (paths == NULL) {
		return -ENOMEM;
	}
	read_paths(pool, ref, ref->files[0].sb.nr_dirs, paths);
	for (uint32_t i = 0; i < ref->files[0].sb.nr_dirs; i++) {
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

		pool->dirs[d].fresh |= pd->files[0].empty;
		for (uint32_t e = 0; !pd->files[0].empty &&
		                     (pd->files[0].sb.flags & TT_SB_CREATING) && e < pool->nr_dirs;
		     e++) {
			pool->dirs[e].fresh |=
			    !pool->dirs[e].files[0].empty &&
			    pool->dirs[e].files[0].sb.set_uid == pd->files[0].sb.set_uid;
		}
	}
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		const struct pool_dir *pd = &pool->dirs[d];

		if (pd->fresh && !create) {
			tt_log_err(pool->log,
			           pd->files[0].empty
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

			rc = rc < 0 ? rc : sb_matches(pool, &pd->files[0].sb, path);
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

/* The remedy for a data file of an existing store that is gone or not its own. */
#define LOST_FILE_HINT                                                                             \
	"if it is lost for good, remove tutti.data from every directory of the store to start an " \
	"empty store"

/* Sibling \p f of existing directory \p pd (given as \p dir) holds its place in it. */
static int
check_sibling(const struct tt_pool *pool, const struct pool_dir *pd, const char *dir, uint32_t f)
{
	const struct tt_superblock *head = &pd->files[0].sb, *sb = &pd->files[f].sb;
	char path[PATH_MAX];
	int rc = file_path(dir, f, path, sizeof(path));

	if (rc < 0) {
		return rc;
	}
	if (pd->files[f].empty) {
		tt_log_err(
		    pool->log,
		    "%s is empty, while %s/%s holds directory %u of a store whose directories "
		    "have %u data files each: the file lost its superblock and its slots; "
		    "%s",
		    path, dir, TT_POOL_FILE_NAME, head->dir_index + 1, head->nr_files,
		    LOST_FILE_HINT);
		return -ENOENT;
	}
	if (sb->set_uid != head->set_uid || sb->store_uid != head->store_uid ||
	    sb->dir_index != head->dir_index || sb->nr_dirs != head->nr_dirs) {
		tt_log_err(pool->log,
		           "%s is a data file of another store or directory than %s/%s (copied or "
		           "moved between directories?): each directory must hold its own files; "
		           "%s",
		           path, dir, TT_POOL_FILE_NAME, LOST_FILE_HINT);
		return -EEXIST;
	}
	if (sb->nr_files != head->nr_files || sb->file_index != f ||
	    (sb->flags & TT_SB_CREATING) != 0) {
		tt_log_err(pool->log,
		           "%s holds data file %u of %u of its directory, not file %u of %u "
		           "(renamed?): give each file its own name back; %s",
		           path, sb->file_index, sb->nr_files, f, head->nr_files, LOST_FILE_HINT);
		return -EINVAL;
	}
	return 0;
}

/*
 * Open the siblings of directory \p d (file 1 on), now that the plan says how many the store
 * has. A fresh directory's are created where missing (whatever they hold is replaced at
 * commit); an existing store's must all be there, each holding its place in the directory.
 */
static int
open_siblings(struct tt_pool *pool, const struct tt_pool_conf *conf, uint32_t d)
{
	struct pool_dir *pd = &pool->dirs[d];
	struct pool_file *files = tt_calloc(pool->files_per_dir, sizeof(*files));

	if (files == NULL) {
		return -ENOMEM;
	}
	files[0] = pd->files[0];
	for (uint32_t f = 1; f < pool->files_per_dir; f++) {
		files[f].fd = -1;
	}
	tt_free(pd->files);
	pd->files = files;
	pd->nr_open = pool->files_per_dir;
	for (uint32_t f = 1; f < pool->files_per_dir; f++) {
		int rc = open_file(pool, pd, conf->dirs[d], f, pd->fresh, !pd->fresh);

		if (rc == -ENOENT && !pd->fresh) {
			tt_log_err(pool->log,
			           "%s/%s.%u is missing, while %s/%s holds directory %u of a store "
			           "whose directories have %u data files each; %s",
			           conf->dirs[d], TT_POOL_FILE_NAME, f, conf->dirs[d],
			           TT_POOL_FILE_NAME, pd->files[0].sb.dir_index + 1,
			           pool->files_per_dir, LOST_FILE_HINT);
		}
		if (rc == 0 && !pd->fresh) {
			rc = check_sibling(pool, pd, conf->dirs[d], f);
		}
		if (rc < 0) {
			return rc;
		}
	}
	for (uint32_t f = 0; f < pool->files_per_dir; f++) {
		pool->fds[d * pool->files_per_dir + f] = pd->files[f].fd;
	}
	return 0;
}

int
tt_pool_open(const struct tt_pool_conf *conf, struct tt_pool **out)
{
	struct tt_pool *pool;
	int rc;

	*out = NULL;
	if (conf->nr_dirs == 0 || conf->nr_dirs > TT_POOL_MAX_DIRS ||
	    (conf->slots_per_dir == 0 && !conf->keep_slots) ||
	    conf->slots_per_dir * conf->nr_dirs >= UINT32_MAX ||
	    (uint64_t)conf->files_per_dir * conf->nr_dirs > TT_POOL_MAX_FILES ||
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
	pool->dirs = tt_calloc(conf->nr_dirs, sizeof(*pool->dirs));
	if (pool->dirs == NULL) {
		tt_pool_close(pool);
		return -ENOMEM;
	}
	rc = 0;
	for (uint32_t d = 0; d < conf->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		pd->dir_fd = -1;
		pd->files = tt_calloc(1, sizeof(*pd->files));
		if (pd->files == NULL) {
			rc = -ENOMEM;
			break;
		}
		pd->files[0].fd = -1;
		pd->nr_open = 1;
	}
	for (uint32_t d = 0; rc == 0 && d < conf->nr_dirs; d++) {
		rc = open_dir(pool, conf, d);
	}
	if (rc == 0) {
		rc = plan_store(pool, conf);
	}
	if (rc == 0) {
		pool->fds =
		    tt_calloc((size_t)pool->nr_dirs * pool->files_per_dir, sizeof(*pool->fds));
		rc = pool->fds == NULL ? -ENOMEM : 0;
	}
	for (uint32_t d = 0; rc == 0 && d < conf->nr_dirs; d++) {
		rc = open_siblings(pool, conf, d);
	}
	for (uint32_t d = 0; rc == 0 && d < conf->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		pd->free = tt_malloc((size_t)pool->slots_per_dir * sizeof(*pd->free));
		if (pd->free == NULL) {
			rc = -ENOMEM;
			break;
		}
		/* Pushed in reverse so that allocation walks the slots from the first: consecutive
		 * slots go to consecutive files. */
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

/* Write the whole path table into directory \p pd's first file. */
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

		tt_sb_path_encode(pool->set_uid, member->files[0].sb.dir_index, member->path,
		                  buf + (size_t)member->files[0].sb.dir_index * TT_SB_PATH_BYTES);
	}
	rc = write_at(pd->files[0].fd, buf, (size_t)nr * TT_SB_PATH_BYTES, TT_SB_PATHS_OFF);
	tt_aligned_free(buf);
	return rc;
}

/* The superblock of file \p f of the \p d-th directory of a new store. The store's size is
 * read from file 0 alone (a resize writes only it): the others record no slot count. */
static void
new_superblock(const struct tt_pool *pool, uint32_t d, uint32_t f, struct tt_superblock *sb)
{
	uint64_t uid = pool->dirs[d].files[0].sb.store_uid;

	memset(sb, 0, sizeof(*sb));
	sb->version = TT_SB_VERSION;
	sb->geo = pool->geo->g;
	sb->key_bytes = pool->key_bytes;
	memcpy(sb->ns_fp, pool->ns_fp, TT_NS_FP_BYTES);
	sb->slot_bytes = pool->slot_bytes;
	sb->data_off = TT_POOL_DATA_OFF;
	sb->nr_slots = f == 0 ? pool->slots_per_dir : 0;
	sb->store_uid = uid;
	sb->set_uid = pool->set_uid;
	sb->nr_dirs = pool->nr_dirs;
	sb->dir_index = d;
	sb->flags = TT_SB_CREATING;
	sb->nr_files = pool->files_per_dir;
	sb->file_index = f;
}

/* The path of file \p f of directory \p pd, for messages. */
static const char *
path_of(const struct pool_dir *pd, uint32_t f, char *buf, size_t len)
{
	return file_path(pd->path, f, buf, len) == 0 ? buf : pd->path;
}

/* Make file \p f of directory \p pd a new store's: its superblock (marked as being created), its
 * size and, in file 0, the path table. */
static int
make_new_file(struct tt_pool *pool, struct pool_dir *pd, uint32_t f)
{
	struct pool_file *pf = &pd->files[f];
	uint64_t bytes = file_size(pool, f);
	char path[PATH_MAX];
	int rc;

	/* A file someone else made empty (touch, a copy) gets the mode of one made here. */
	rc = pf->created || fchmod(pf->fd, 0600) == 0 ? 0 : -errno;
	/* A replaced store's slots go first: its headers are not met again. A sibling found in a
	 * fresh directory holds nothing of this store either. */
	if (rc == 0 && (pd->replaced || f > 0) && !pf->empty && ftruncate(pf->fd, 0) != 0) {
		rc = -errno;
	}
	if (rc == 0) {
		rc = write_superblock(pf->fd, &pf->sb);
	}
	if (rc == 0 && pf->file_bytes > bytes && ftruncate(pf->fd, (off_t)bytes) != 0) {
		rc = -errno;
	}
	if (rc == 0) {
		rc = reserve(pf->fd, head_bytes(pool, f), bytes, path_of(pd, f, path, sizeof(path)),
		             pool->log);
	}
	if (rc == 0 && f == 0) {
		rc = write_paths(pool, pd);
	}
	return rc;
}

/* Remove data files beyond the store's count that an earlier store of more files left (under
 * the owner lock, as every creation and removal of a data file). */
static void
remove_stale_files(const struct tt_pool *pool, const struct pool_dir *pd)
{
	for (uint32_t f = pool->files_per_dir; f < TT_SB_MAX_FILES; f++) {
		char name[TT_POOL_NAME_BYTES];
		struct stat st;

		if (tt_pool_file_name(f, name, sizeof(name)) == 0 &&
		    fstatat(pd->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode) && unlinkat(pd->dir_fd, name, 0) != 0) {
			tt_log_warn(pool->log,
			            "%s/%s: cannot remove a data file no longer used: %s", pd->path,
			            name, tutti_strerror(-errno));
		}
	}
}

/*
 * A new store: every file of every directory gets its superblock marked as being created, its
 * size and (file 0) the path table; only when all have them is each superblock written again
 * without the mark, the siblings' before any file 0's. A process killed in between leaves a
 * file 0 that says its creation never finished (opened again with TUTTI_OPEN_CREATE, the store
 * is made anew), never a store with some directories or files missing.
 */
static int
make_new_store(struct tt_pool *pool)
{
	uint32_t d, f, fail_d = 0, fail_f = 0;
	int rc = 0;

	for (d = 0; d < pool->nr_dirs; d++) {
		const struct tt_superblock *old = &pool->dirs[d].files[0].sb;

		if (pool->dirs[d].replaced) {
			tt_log_warn(
			    pool->log,
			    "%s/%s held a store of another geometry, key size or namespace (%u "
			    "layers, %u KV heads, head dim %u, %u-byte keys): replaced by an "
			    "empty store",
			    pool->dirs[d].path, TT_POOL_FILE_NAME, old->geo.nr_layers,
			    old->geo.nr_kv_heads, old->geo.head_dim, old->key_bytes);
		}
		for (f = pool->files_per_dir; f-- > 0;) {
			new_superblock(pool, d, f, &pool->dirs[d].files[f].sb);
		}
	}
	for (d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		for (f = 0; rc == 0 && f < pool->files_per_dir; f++) {
			rc = make_new_file(pool, &pool->dirs[d], f);
			fail_d = d;
			fail_f = f;
		}
	}
	/* Done: the siblings first, then the files 0 that say so. */
	for (uint32_t pass = 0; rc == 0 && pass < 2; pass++) {
		uint32_t first = pass == 0 ? 1 : 0, end = pass == 0 ? pool->files_per_dir : 1;

		for (d = 0; rc == 0 && d < pool->nr_dirs; d++) {
			for (f = first; rc == 0 && f < end; f++) {
				struct pool_file *pf = &pool->dirs[d].files[f];

				pf->sb.flags = 0;
				rc = write_superblock(pf->fd, &pf->sb);
				fail_d = d;
				fail_f = f;
			}
		}
	}
	if (rc < 0) {
		char path[PATH_MAX];

		tt_log_err(pool->log, "%s: cannot create the store: %s",
		           path_of(&pool->dirs[fail_d], fail_f, path, sizeof(path)),
		           tutti_strerror(rc));
		/* Back to files holding nothing (the ones created here go at close). */
		for (uint32_t e = 0; e < pool->nr_dirs; e++) {
			for (uint32_t g = 0; g < pool->files_per_dir; g++) {
				const struct pool_file *pf = &pool->dirs[e].files[g];

				if (!pf->created && ftruncate(pf->fd, 0) != 0) {
					tt_log_warn(pool->log,
					            "%s: cannot empty the file again: %s",
					            path_of(&pool->dirs[e], g, path, sizeof(path)),
					            tutti_strerror(-errno));
				}
			}
		}
		return rc;
	}
	for (d = 0; d < pool->nr_dirs; d++) {
		remove_stale_files(pool, &pool->dirs[d]);
	}
	tt_log_info(pool->log, "created a store of %u directories, %u slots each in %u data files",
	            pool->nr_dirs, pool->slots_per_dir, pool->files_per_dir);
	return 0;
}

/*
 * An existing store: grow files first (extend every file that needs it; on failure, cut them
 * back), then the superblocks (file 0's: the others record no size), then shrink; a process
 * killed in between leaves superblocks that disagree over files that are all large enough,
 * which the next open resolves (plan_existing_store). The path table is rewritten where it
 * names other paths.
 */
static int
update_store(struct tt_pool *pool)
{
	uint32_t nr = pool->nr_dirs * pool->files_per_dir, i;
	char path[PATH_MAX];
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
	for (uint32_t d = 0; rc == 0 && pool->paths_stale && d < pool->nr_dirs; d++) {
		rc = write_paths(pool, &pool->dirs[d]);
	}
	for (i = 0; rc == 0 && i < nr; i++) {
		struct pool_dir *pd = &pool->dirs[i / pool->files_per_dir];
		uint32_t f = i % pool->files_per_dir;
		struct pool_file *pf = &pd->files[f];

		if (pf->file_bytes < file_size(pool, f)) {
			if (pd->files[0].sb.nr_slots == pool->slots_per_dir) {
				tt_log_warn(pool->log,
				            "%s is shorter than its slots (cut by something else): "
				            "extended; what was cut off is gone",
				            path_of(pd, f, path, sizeof(path)));
			}
			rc = reserve(pf->fd, head_bytes(pool, f), file_size(pool, f),
			             path_of(pd, f, path, sizeof(path)), pool->log);
		}
	}
	if (rc < 0) {
		/* Back to the sizes (and times) found: the open fails as if never tried. */
		for (uint32_t e = 0; e < i; e++) {
			uint32_t f = e % pool->files_per_dir;
			struct pool_file *pf = &pool->dirs[e / pool->files_per_dir].files[f];

			if (pf->file_bytes < file_size(pool, f) &&
			    ftruncate(pf->fd, (off_t)pf->file_bytes) == 0) {
				futimens(pf->fd, pf->times);
			}
		}
		return rc;
	}
	for (uint32_t d = 0; rc == 0 && d < pool->nr_dirs; d++) {
		struct pool_file *head = &pool->dirs[d].files[0];

		if (head->sb.nr_slots != pool->slots_per_dir) {
			head->sb.nr_slots = pool->slots_per_dir;
			rc = write_superblock(head->fd, &head->sb);
		}
	}
	for (i = 0; rc == 0 && i < nr; i++) {
		uint32_t f = i % pool->files_per_dir;
		const struct pool_file *pf = &pool->dirs[i / pool->files_per_dir].files[f];

		if (pf->file_bytes > file_size(pool, f) &&
		    ftruncate(pf->fd, (off_t)file_size(pool, f)) != 0) {
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

		for (uint32_t f = 0; pd->files != NULL && f < pd->nr_open; f++) {
			struct pool_file *pf = &pd->files[f];
			char name[TT_POOL_NAME_BYTES];

			/* A failed open leaves no file behind, however large: each was created by
			 * this open under the owner lock, which is still held. */
			if (!pool->committed && pf->created &&
			    tt_pool_file_name(f, name, sizeof(name)) == 0) {
				unlinkat(pd->dir_fd, name, 0);
			}
			if (pf->fd >= 0) {
				/* Unlock explicitly: another reference to the open file (an I/O
				 * ring being torn down) must not keep the store locked after close.
				 */
				flock(pf->fd, LOCK_UN);
				close(pf->fd);
			}
		}
		/* Nor the directory it made, when it holds its lock (rmdir removes only an empty
		 * one; an opener that locks it next finds it gone and looks it up again). */
		if (!pool->committed && pd->dir_made && pd->owner_locked) {
			rmdir(pd->path);
		}
		/* The owner lock last: the data files are released before another opener may go. */
		if (pd->dir_fd >= 0) {
			close(pd->dir_fd);
		}
		tt_free(pd->files);
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
tt_pool_nr_files(const struct tt_pool *pool)
{
	return pool->nr_dirs * pool->files_per_dir;
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
tt_pool_locate(const struct tt_pool *pool, uint32_t slot, uint32_t *file, uint64_t *off)
{
	uint32_t local = slot % pool->slots_per_dir;

	*file = slot / pool->slots_per_dir * pool->files_per_dir + local % pool->files_per_dir;
	*off = TT_POOL_DATA_OFF + (uint64_t)(local / pool->files_per_dir) * pool->slot_bytes;
}

int
tt_pool_file_info(const struct tt_pool *pool, uint32_t file, uint32_t *dir, uint32_t *index,
                  uint64_t *off, uint64_t *bytes, char *path, size_t len)
{
	char name[TT_POOL_NAME_BYTES];
	int rc, n;

	*dir = file / pool->files_per_dir;
	*index = file % pool->files_per_dir;
	*off = TT_POOL_DATA_OFF;
	*bytes = file_rows(pool->slots_per_dir, pool->files_per_dir, *index) * pool->slot_bytes;
	if (path == NULL) {
		return 0;
	}
	rc = tt_pool_file_name(*index, name, sizeof(name));
	if (rc < 0) {
		return rc;
	}
	n = snprintf(path, len, "%s/%s", pool->dirs[*dir].path, name);
	if (n < 0 || (size_t)n >= len) {
		if (len > 0) {
			path[0] = '\0';
		}
		return -ENAMETOOLONG;
	}
	return 0;
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
tt_pool_slot_uid(const struct tt_pool *pool, uint32_t slot)
{
	return pool->dirs[slot / pool->slots_per_dir].files[0].sb.store_uid;
}

void
tt_pool_reset_free(struct tt_pool *pool, const uint8_t *used)
{
	for (uint32_t d = 0; d < pool->nr_dirs; d++) {
		struct pool_dir *pd = &pool->dirs[d];

		pd->nr_free = 0;
		/* Pushed in reverse so that allocation walks the slots from the first. */
		for (uint32_t i = pool->slots_per_dir; i-- > 0;) {
			if (!used[(uint64_t)d * pool->slots_per_dir + i]) {
				pd->free[pd->nr_free++] = i;
			}
		}
	}
}

bool
tt_pool_on_disk(const struct tt_pool *pool, uint32_t slot)
{
	const struct pool_dir *pd = &pool->dirs[slot / pool->slots_per_dir];
	uint32_t file;
	uint64_t off;

	if (pool->fresh || slot % pool->slots_per_dir >= pd->kept_slots) {
		return false;
	}
	/* A slot that starts inside its file: one cut by a truncation is read too, and its header
	 * or payload found damaged as any other. */
	tt_pool_locate(pool, slot, &file, &off);
	return off < tt_pool_file_bytes(pool, file);
}

uint64_t
tt_pool_file_bytes(const struct tt_pool *pool, uint32_t file)
{
	return pool->dirs[file / pool->files_per_dir].files[file % pool->files_per_dir].file_bytes;
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
	fd = open_data_fd(dir_fd, TT_POOL_FILE_NAME, path, false, false, &created, log);
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
	} else if (rc < 0 && rc != -EPROTO && rc != -EBADMSG) {
		tt_log_err(log, "%s: reading the superblock: %s", path, tutti_strerror(rc));
	}
	return rc;
}
