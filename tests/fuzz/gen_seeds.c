/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: writes valid encodings of every on-disk header into a corpus directory per fuzz
 * target (DIR/superblock, DIR/slot_header), so that fuzzing starts from real formats.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "format/format.h"

static int
put(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(buf, 1, len, f) != len) {
		perror(path);
		if (f != NULL) {
			fclose(f);
		}
		return 1;
	}
	return fclose(f) != 0;
}

int
main(int argc, char **argv)
{
	static uint8_t buf[TUTTI_SLOT_HEADER_BYTES];
	static struct tt_slot_header h;
	char sb_dir[4096], slot_dir[4096];
	struct tt_superblock sb;
	const uint32_t layers[] = {1, 2, 32, 80, TT_SLOT_MAX_LAYERS};
	int err = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds DIR\n");
		return 2;
	}
	snprintf(sb_dir, sizeof(sb_dir), "%s/superblock", argv[1]);
	snprintf(slot_dir, sizeof(slot_dir), "%s/slot_header", argv[1]);
	mkdir(argv[1], 0700);
	if ((mkdir(sb_dir, 0700) != 0 && errno != EEXIST) ||
	    (mkdir(slot_dir, 0700) != 0 && errno != EEXIST)) {
		perror(argv[1]);
		return 1;
	}
	memset(&sb, 0, sizeof(sb));
	sb.version = TT_SB_VERSION;
	tutti_geometry_preset("llama-3-8b", &sb.geo);
	sb.key_bytes = 32;
	sb.slot_bytes = tutti_geometry_slot_bytes(&sb.geo);
	sb.data_off = 1u << 20;
	sb.nr_slots = 1000;
	sb.store_uid = 0x0123456789abcdefull;
	sb.set_uid = 0xfedcba9876543210ull;
	sb.nr_dirs = 1;
	sb.nr_files = 1;
	tt_sb_encode(&sb, buf);
	err |= put(sb_dir, "llama", buf, TT_SB_BYTES);
	/* File 7 of 16 of directory 3 of 4, being created. */
	sb.nr_dirs = 4;
	sb.dir_index = 3;
	sb.nr_files = 16;
	sb.file_index = 7;
	sb.flags = TT_SB_CREATING;
	tt_sb_encode(&sb, buf);
	err |= put(sb_dir, "creating", buf, TT_SB_BYTES);
	/* Path table entries (the same target decodes them). */
	tt_sb_path_encode(sb.set_uid, 3, "/mnt/nvme3/tutti", buf);
	err |= put(sb_dir, "path", buf, TT_SB_PATH_BYTES);
	tt_sb_path_encode(sb.set_uid, 0, "/", buf);
	err |= put(sb_dir, "path-root", buf, TT_SB_PATH_BYTES);
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
		char name[32];

		memset(&h, 0, sizeof(h));
		h.store_uid = sb.store_uid;
		h.seq = 1000 + i;
		h.nr_blocks = 16;
		h.key_bytes = i % 2 ? 16 : 64;
		h.nr_objects = layers[i];
		h.has_parent = i % 2;
		memset(h.key, 0x11 * (int)(i + 1), sizeof(h.key));
		memset(h.parent, 0x22, sizeof(h.parent));
		for (uint32_t l = 0; l < h.nr_objects; l++) {
			h.csum[l] = 0x9e3779b97f4a7c15ull * (l + 1);
		}
		tt_slot_encode(&h, buf);
		snprintf(name, sizeof(name), "layers%u", layers[i]);
		err |= put(slot_dir, name, buf, TUTTI_SLOT_HEADER_BYTES);
	}
	return err;
}
