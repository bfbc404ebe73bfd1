/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Numbers (and paths, below) on the command line, one parser for every program of tools/ and
 * bench/. An option's
 * value is accepted only when the whole of it is one plain decimal number (no sign, no spaces,
 * no other base) within the option's range; otherwise the program says which option and why on
 * stderr, and the caller exits with a usage error. strtoull alone would take " -1" as 2^64-1 and
 * a shift of a huge MiB count would wrap to 0.
 */
#ifndef TUTTI_TOOLS_CLIARG_H
#define TUTTI_TOOLS_CLIARG_H

#include <stdbool.h>
#include <stdint.h>

/* Parse \p s into *out when it is a whole number in [min, max]; 0 or -EINVAL (not a number)
 * or -ERANGE (outside the range). Prints nothing. */
int cliarg_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* The same for a finite decimal number (fraction and exponent allowed, no inf or nan). */
int cliarg_parse_double(const char *s, double min, double max, double *out);

/* Parse the value \p s of option \p opt of program \p prog; on failure print
 * "prog: opt: ..." with the range and return the error. *out is set only on success. */
int cliarg_u64(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
               uint64_t *out);
int cliarg_u32(const char *prog, const char *opt, const char *s, uint32_t min, uint32_t max,
               uint32_t *out);
int cliarg_double(const char *prog, const char *opt, const char *s, double min, double max,
                  double *out);

/*
 * Paths on the command line. Whether \p path, the value of option \p opt (NULL: a path the
 * program made itself, such as a default), is a directory (\p dir) or a regular file, or does
 * not exist (the command reports that itself, as it goes). A symbolic link is followed when
 * \p dir, and passes otherwise (a file written by a rename replaces the link; a file read is
 * checked again where it is opened). Otherwise prints "prog: opt path is a FIFO, not a regular
 * file" (or what it is, not a directory) and returns -EINVAL: a FIFO would block the command,
 * and a device or a directory is no place for its output.
 */
int cliarg_path(const char *prog, const char *opt, const char *path, bool dir);

/*
 * Open \p path, the value of option \p opt (as for cliarg_path), with \p flags (and \p mode
 * where they create it), only if it is a regular file: cliarg_path refuses another kind before
 * anything is opened, saying so, and the open is made with O_NONBLOCK and its descriptor
 * checked, so that what stands there by then is refused too rather than blocking (a FIFO's
 * open waits for a peer). O_NONBLOCK is then cleared unless \p flags has it, and O_CLOEXEC is
 * always set. Returns the descriptor, -EINVAL for another kind, or the open's -errno (for the
 * caller to report).
 */
int cliarg_open(const char *prog, const char *opt, const char *path, int flags, unsigned mode);

#endif /* TUTTI_TOOLS_CLIARG_H */
