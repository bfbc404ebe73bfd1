/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a kernel first launched by a test (t_lazy.cu), built with CUDA only.
 */
#ifndef T_LAZY_H
#define T_LAZY_H

#ifdef __cplusplus
extern "C" {
#endif

/* Launch the kernel on \p stream (NULL: the legacy default stream). Returns 0 or -EIO. */
int t_lazy_launch(void *stream);

#ifdef __cplusplus
}
#endif

#endif /* T_LAZY_H */
