/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Administration commands of the tutti CLI: inspect and fsck.
 */
#ifndef TUTTI_TOOLS_ADMIN_H
#define TUTTI_TOOLS_ADMIN_H

/* `tutti inspect DIR...`: returns the process exit code. */
int cmd_inspect(int argc, char **argv);

/* `tutti fsck DIR... [--repair]`: returns the process exit code (see the usage text). */
int cmd_fsck(int argc, char **argv);

#endif /* TUTTI_TOOLS_ADMIN_H */
