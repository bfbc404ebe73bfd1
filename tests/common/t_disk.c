/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: byte-level access to a store's data file (see t_disk.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/le.h"
#include "t_disk.h"
#include "t_util.h"

#define SECTOR 4096u
#define COPY_CHUNK (1u << 20)

char *
t_data_path(const char *dir)
{
	return t_path_join(dir, T_DATA_FILE);
}

uint64_t
t_file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Read or write exactly \p len bytes at \p off (all aligned) through \p fd. */
static int
full_io(int fd, bool write, uint8_t *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = write ? pwrite(fd, buf + done, len - done, (off_t)(off + done))
		                  : pread(fd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n < 0) {
			return -errno;
		}
		if (n == 0) {
			return -EIO;
		}
		done += (size_t)n;
	}
	return 0;
}

/* The covering sectors of [off, off + len) of one file through O_DIRECT; patch them with \p in
 * when not NULL (and write back), copy them out to \p out when not NULL. */
static int
file_rmw(const char *path, uint64_t off, size_t len, const void *in, void *out)
{
	uint64_t first = off / SECTOR * SECTOR;
	uint64_t end = (off + len + SECTOR - 1) / SECTOR * SECTOR;
	size_t span = (size_t)(end - first);
	uint8_t *buf;
	int fd, rc;

	if (len == 0) {
		return 0;
	}
	fd = open(path, (in != NULL ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		return -errno;
	}
	buf = t_aligned_alloc(span);
	rc = full_io(fd, false, buf, span, first);
	if (rc == 0 && out != NULL) {
		memcpy(out, buf + (off - first), len);
	}
	if (rc == 0 && in != NULL) {
		memcpy(buf + (off - first), in, len);
		rc = full_io(fd, true, buf, span, first);
		if (rc == 0 && fdatasync(fd) != 0) {
			rc = -errno;
		}
	}
	free(buf);
	close(fd);
	return rc;
}

/* How a directory spreads its slots over its files, from the superblock of its first file
 * \p path; one file when it gives none. */
static void
layout_of(const char *path, uint32_t *nr_files, uint64_t *slot_bytes)
{
	uint8_t sb[T_SB_BYTES];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = strlen(path), base = strlen(T_DATA_FILE);

	*nr_files = 1;
	*slot_bytes = 0;
	if (fd < 0) {
		return;
	}
	if (len > base && path[len - base - 1] == '/' &&
	    strcmp(path + len - base, T_DATA_FILE) == 0 &&
	    pread(fd, sb, sizeof(sb), 0) == (ssize_t)sizeof(sb) && memcmp(sb, "TUTTISB", 8) == 0 &&
	    get32(sb + T_SB_OFF_VERSION) == T_SB_VERSION) {
		*nr_files = get32(sb + T_SB_OFF_NR_FILES);
		*slot_bytes = get64(sb + T_SB_OFF_SLOT_BYTES);
	}
	close(fd);
	if (*nr_files == 0 || *slot_bytes == 0 || *slot_bytes % SECTOR != 0) {
		*nr_files = 1;
	}
}

/* The file of a directory whose first file is \p path that holds slot \p slot, and that slot's
 * offset in it. */
static char *
slot_file(const char *path, uint32_t nr_files, uint64_t slot_bytes, uint64_t slot, uint64_t *off)
{
	size_t len = strlen(path) + 16;
	char *file = malloc(len);

	if (file == NULL) {
		abort();
	}
	if (slot % nr_files == 0) {
		snprintf(file, len, "%s", path);
	} else {
		snprintf(file, len, "%s.%u", path, (unsigned)(slot % nr_files));
	}
	*off = T_DATA_OFF + slot / nr_files * slot_bytes;
	return file;
}

/* [off, off + len) of a directory's slots, as if its files were one (t_disk.h), piece by piece
 * in the files holding them. */
static int
sector_rmw(const char *path, uint64_t off, size_t len, const void *in, void *out)
{
	uint32_t nr_files;
	uint64_t slot_bytes;
	int rc = 0;

	layout_of(path, &nr_files, &slot_bytes);
	if (nr_files == 1 || off + len <= T_DATA_OFF) {
		return file_rmw(path, off, len, in, out);
	}
	if (off < T_DATA_OFF) {
		size_t head = (size_t)(T_DATA_OFF - off);

		rc = file_rmw(path, off, head, in, out);
		off += head;
		len -= head;
		in = in != NULL ? (const uint8_t *)in + head : NULL;
		out = out != NULL ? (uint8_t *)out + head : NULL;
	}
	while (rc == 0 && len > 0) {
		uint64_t slot = (off - T_DATA_OFF) / slot_bytes,
		         within = (off - T_DATA_OFF) % slot_bytes;
		size_t piece = (size_t)(slot_bytes - within < len ? slot_bytes - within : len);
		uint64_t file_off;
		char *file = slot_file(path, nr_files, slot_bytes, slot, &file_off);

		rc = file_rmw(file, file_off + within, piece, in, out);
		free(file);
		off += piece;
		len -= piece;
		in = in != NULL ? (const uint8_t *)in + piece : NULL;
		out = out != NULL ? (uint8_t *)out + piece : NULL;
	}
	return rc;
}

int
t_disk_read(const char *path, uint64_t off, void *buf, size_t len)
{
	return sector_rmw(path, off, len, NULL, buf);
}

int
t_disk_write(const char *path, uint64_t off, const void *buf, size_t len)
{
	return sector_rmw(path, off, len, buf, NULL);
}

int
t_disk_flip_bit(const char *path, uint64_t off, unsigned bit)
{
	uint8_t b;
	int rc = t_disk_read(path, off, &b, 1);

	if (rc < 0) {
		return rc;
	}
	b ^= (uint8_t)(1u << (bit & 7));
	return t_disk_write(path, off, &b, 1);
}

int
t_disk_zero(const char *path, uint64_t off, size_t len)
{
	uint8_t *z = calloc(1, len ? len : 1);
	int rc;

	if (z == NULL) {
		return -ENOMEM;
	}
	rc = t_disk_write(path, off, z, len);
	free(z);
	return rc;
}

int
t_file_copy(const char *src, const char *dst)
{
	uint64_t size = t_file_size(src), off = 0;
	uint8_t *buf = t_aligned_alloc(COPY_CHUNK);
	int in, out, rc = 0;

	in = open(src, O_RDONLY | O_DIRECT | O_CLOEXEC);
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
	if (in < 0 || out < 0 || size % SECTOR != 0) {
		rc = in < 0 || out < 0 ? -errno : -EINVAL;
	}
	while (rc == 0 && off < size) {
		size_t n = (size_t)(size - off < COPY_CHUNK ? size - off : COPY_CHUNK);

		rc = full_io(in, false, buf, n, off);
		if (rc == 0) {
			rc = full_io(out, true, buf, n, off);
		}
		off += n;
	}
	if (rc == 0 && fdatasync(out) != 0) {
		rc = -errno;
	}
	if (in >= 0) {
		close(in);
	}
	if (out >= 0) {
		close(out);
	}
	free(buf);
	return rc;
}

int
t_file_create(const char *path, const void *buf, size_t len)
{
	uint8_t *bounce = t_aligned_alloc(COPY_CHUNK);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
	int rc = fd < 0 ? -errno : len % SECTOR != 0 ? -EINVAL : 0;

	for (size_t off = 0; rc == 0 && off < len; off += COPY_CHUNK) {
		size_t n = len - off < COPY_CHUNK ? len - off : COPY_CHUNK;

		memcpy(bounce, (const uint8_t *)buf + off, n);
		rc = full_io(fd, true, bounce, n, off);
	}
	if (rc == 0 && fdatasync(fd) != 0) {
		rc = -errno;
	}
	if (fd >= 0) {
		close(fd);
	}
	free(bounce);
	return rc;
}

uint8_t *
t_file_read_all(const char *path, size_t *len)
{
	uint64_t size = t_file_size(path);
	size_t span = (size_t)((size + SECTOR - 1) / SECTOR * SECTOR);
	uint8_t *buf = t_aligned_alloc(span ? span : SECTOR);
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	int rc = fd < 0 ? -errno : 0;

	if (rc == 0 && size % SECTOR == 0) {
		rc = full_io(fd, false, buf, (size_t)size, 0);
	} else if (rc == 0) {
		rc = -EINVAL; /* O_DIRECT reads whole sectors */
	}
	if (fd >= 0) {
		close(fd);
	}
	if (rc < 0) {
		free(buf);
		return NULL;
	}
	*len = (size_t)size;
	return buf;
}

uint32_t
t_nr_slots(const char *path, const struct tutti_geometry *g)
{
	uint64_t slot_bytes = tutti_geometry_slot_bytes(g), n = 0, layout_slot_bytes;
	uint32_t nr_files;

	layout_of(path, &nr_files, &layout_slot_bytes);
	/* Slots up to the first one whose file does not hold it whole. */
	for (;; n++) {
		uint64_t off;
		char *file = slot_file(path, nr_files, slot_bytes, n, &off);
		bool whole = t_file_size(file) >= off + slot_bytes;

		free(file);
		if (!whole) {
			return (uint32_t)n;
		}
	}
}

uint8_t *
t_read_headers(const char *path, const struct tutti_geometry *g, uint32_t *nr)
{
	uint32_t n = t_nr_slots(path, g);
	uint8_t *all = malloc((size_t)(n ? n : 1) * TUTTI_SLOT_HEADER_BYTES);
	int rc = 0;

	for (uint32_t s = 0; rc == 0 && all != NULL && s < n; s++) {
		rc = t_disk_read(path, t_slot_off(g, s), all + (size_t)s * TUTTI_SLOT_HEADER_BYTES,
		                 TUTTI_SLOT_HEADER_BYTES);
	}
	if (rc < 0 || all == NULL) {
		free(all);
		return NULL;
	}
	*nr = n;
	return all;
}

bool
t_hdr_committed(const uint8_t *hdr)
{
	return memcmp(hdr, T_SLOT_MAGIC, 8) == 0;
}

bool
t_hdr_has_key(const uint8_t *hdr, const uint8_t *key, uint32_t key_bytes)
{
	return t_hdr_committed(hdr) && memcmp(hdr + T_SLOT_OFF_KEY, key, key_bytes) == 0;
}

int
t_find_key_slots(const char *path, const struct tutti_geometry *g, const uint8_t *key,
                 uint32_t key_bytes, uint32_t *slots, uint32_t max)
{
	uint32_t n, found = 0;
	uint8_t *all = t_read_headers(path, g, &n);

	if (all == NULL) {
		return -EIO;
	}
	for (uint32_t s = 0; s < n; s++) {
		if (t_hdr_has_key(all + (size_t)s * TUTTI_SLOT_HEADER_BYTES, key, key_bytes)) {
			if (found < max) {
				slots[found] = s;
			}
			found++;
		}
	}
	free(all);
	return (int)found;
}

uint32_t
t_key_slot(const char *path, const struct tutti_geometry *g, const uint8_t *key, uint32_t key_bytes)
{
	uint32_t slot = 0;
	int n = t_find_key_slots(path, g, key, key_bytes, &slot, 1);

	if (n != 1) {
		fprintf(stderr, "t_key_slot: %s holds the key in %d slots, not 1\n", path, n);
		abort();
	}
	return slot;
}

uint32_t
t_free_slot(const char *path, const struct tutti_geometry *g)
{
	uint32_t n, slot = UINT32_MAX;
	uint8_t *all = t_read_headers(path, g, &n);

	for (uint32_t s = 0; all != NULL && s < n; s++) {
		if (!t_hdr_committed(all + (size_t)s * TUTTI_SLOT_HEADER_BYTES)) {
			slot = s;
			break;
		}
	}
	free(all);
	return slot;
}
