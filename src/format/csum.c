/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Object checksums: XXH3-64 with Tutti's own secret. The secret is the first 24 outputs of
 * splitmix64 seeded with 0x7475747469 ("tutti"), stored as little-endian words, so that GPU code
 * can carry the same 192 bytes without depending on a library's internal default secret.
 */
#include <xxhash.h>
#ifdef TT_HAVE_XXH_DISPATCH
/* The same function with the CPU's widest vector unit, chosen at run time (CMakeLists.txt). */
#include <xxh_x86dispatch.h>
#endif

#include "format/format.h"

const uint64_t tt_csum_secret[TT_CSUM_SECRET_WORDS] = {
    0x1511d073f23682f0ull, 0xe44c17e732548364ull, 0xc24c17051a9f61c5ull, 0xa2c31b4644f18d5dull,
    0x2044febaab2fda3aull, 0xf1ae4cfd84dc19e2ull, 0xadb7479de49e61e7ull, 0x9cc34d7d853d36ecull,
    0x6ad7282b7f82d030ull, 0xe0fe5e35b37490e3ull, 0xc6155fd95e2391edull, 0x0d8f99ec33cc7ed9ull,
    0x633e4a1ef2253ddcull, 0x9ae41a30cad12e49ull, 0x8a5dba66fec969c4ull, 0xea65ed31c5082b8eull,
    0xb818fe36dba9c6c5ull, 0xc602a9b6c059d588ull, 0x68e94ce337278f0cull, 0x7687e4418f765e9full,
    0x96ad4842ddf8a344ull, 0xba15bc44188e47d2ull, 0x04029a0e50a73204ull, 0xf71685bf200b6806ull};

uint64_t
tt_csum(const void *p, size_t len)
{
	return XXH3_64bits_withSecret(p, len, tt_csum_secret, sizeof(tt_csum_secret));
}
