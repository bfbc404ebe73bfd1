/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Administration commands of the tutti CLI: inspect, fsck, profile and ceiling.
 */
#ifndef TUTTI_TOOLS_ADMIN_H
#define TUTTI_TOOLS_ADMIN_H

/* `tutti inspect DIR...`: returns the process exit code. */
int cmd_inspect(int argc, char **argv);

/* `tutti fsck DIR... [--repair]`: returns the process exit code (see the usage text). */
int cmd_fsck(int argc, char **argv);

/* `tutti profile [--dir DIR]... [--out FILE]`: the layerwise pipeline's offline profile. */
int cmd_profile(int argc, char **argv);

/* `tutti ceiling --dir DIR...`: the storage's (and pinned copies') limit
 * (tools/common/ceiling.h). */
int cmd_ceiling(int argc, char **argv);

#endif /* TUTTI_TOOLS_ADMIN_H */
