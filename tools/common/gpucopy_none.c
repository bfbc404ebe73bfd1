/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpucopy.h in a build without CUDA: every call says so (-EOPNOTSUPP).
 */
#include <errno.h>

#include "gpucopy.h"

int
gpucopy_set_device(int device)
{
	(void)device;
	return -EOPNOTSUPP;
}

int
gpucopy_dev_alloc(size_t bytes, void **p)
{
	*p = NULL;
	return -EOPNOTSUPP;
}

void
gpucopy_dev_free(void *p)
{
}

int
gpucopy_host_alloc(size_t bytes, void **p)
{
	*p = NULL;
	return -EOPNOTSUPP;
}

void
gpucopy_host_free(void *p)
{
}

int
gpucopy_host_register(void *p, size_t bytes)
{
	return -EOPNOTSUPP;
}

void
gpucopy_host_unregister(void *p)
{
}

int
gpucopy_copy(void *dst, const void *src, size_t bytes)
{
	return -EOPNOTSUPP;
}

int
gpucopy_fill(void *dst, int byte, size_t bytes)
{
	return -EOPNOTSUPP;
}

int
gpucopy_stream_create(int device, void **stream)
{
	*stream = NULL;
	return -EOPNOTSUPP;
}

void
gpucopy_stream_destroy(void *stream)
{
}

int
gpucopy_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
	return -EOPNOTSUPP;
}

int
gpucopy_event_create(int device, void **event)
{
	*event = NULL;
	return -EOPNOTSUPP;
}

void
gpucopy_event_destroy(void *event)
{
}

int
gpucopy_event_record(void *event, void *stream)
{
	return -EOPNOTSUPP;
}

int
gpucopy_event_sync(void *event)
{
	return -EOPNOTSUPP;
}
