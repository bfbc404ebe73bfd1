/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * Tutti: an SSD-backed KV-cache object store for LLM serving. Include this header for the whole
 * public API.
 */
#ifndef TUTTI_TUTTI_H
#define TUTTI_TUTTI_H

#include "tutti/base.h"
#include "tutti/engine.h"
#include "tutti/geometry.h"
#include "tutti/kv.h"
#include "tutti/remote.h"
#include "tutti/store.h"
#include "tutti/pipeline.h"

#endif /* TUTTI_TUTTI_H */
