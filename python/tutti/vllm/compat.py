# SPDX-License-Identifier: Apache-2.0
"""What differs, for the connector, between the vLLM releases it supports: 0.26 (the GPU build
of torch 2.11) to 0.32 (the CPU build CI runs). Every version check lives here; the rest of the
connector is one code path. docs/vllm.md ("vLLM versions") lists the differences and how each is
handled; most need no check at all, because the connector keeps to what both releases do (it
implements get_finished, which 0.32's get_transfer_results wraps; it finishes a layerwise step
wherever the step's end shows, since 0.26 skips wait_for_save on steps without a forward)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import vllm
from vllm.v1.core import kv_cache_utils

from tutti.vllm.log import log

if TYPE_CHECKING:
    from vllm.config import VllmConfig

OLDEST = (0, 26)  # the releases the connector is tested with, oldest and newest
NEWEST = (0, 32)


def version_of(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "0.32.0" or "0.26.0+cu130"."""
    parts = text.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


VLLM = version_of(vllm.__version__)

# vLLM 0.32 counts prompt tokens by the tier that supplied them (CacheHitSource); connectors
# name theirs. 0.26 has no such metric.
try:
    from vllm.v1.metrics.cache_hit_source import CacheHitSource
except ImportError:  # vLLM 0.26
    CacheHitSource = None  # type: ignore[assignment,misc]


def check_version(version: str = vllm.__version__) -> bool:
    """Whether ``version`` is in the tested range; a warning says so when it is not."""
    v = version_of(version)
    if OLDEST <= v <= NEWEST:
        return True
    log.warning("tutti: vLLM %s is outside the versions TuttiConnector is tested with (%d.%d to "
                "%d.%d); its connector API may differ (docs/vllm.md, \"vLLM versions\")", version,
                *OLDEST, *NEWEST)
    return False


def kv_cache_layout(vllm_config: VllmConfig) -> str | None:
    """The name of the KV cache layout vLLM uses, for the namespace: a page holds another
    arrangement of the same bytes in another layout. vLLM 0.32 resolves it into the cache
    config (e.g. "LBHNC"); 0.26 has its attention backends ask one function ("NHD" or
    "HND")."""
    name = getattr(vllm_config.cache_config, "kv_cache_layout", None)
    if name is not None or VLLM >= (0, 27):
        return str(name) if name is not None else None
    from vllm.config import get_current_vllm_config_or_none, set_current_vllm_config
    from vllm.v1.attention.backends.utils import (  # type: ignore[attr-defined]  # 0.26
        get_kv_cache_layout,
    )

    # It reads the current vLLM config (and raises without one, as in a scheduler created
    # outside that context); the answer is cached for the process, as the backends get it.
    if get_current_vllm_config_or_none() is not None:
        return str(get_kv_cache_layout())
    with set_current_vllm_config(vllm_config):
        return str(get_kv_cache_layout())


def hashes_survive_restarts(hash_algo: str) -> bool:
    """Whether vLLM's block hashes with ``hash_algo`` are the same in the next process, so that
    a restarted server finds its stored prefixes. vLLM seeds the chain's root (NONE_HASH) with
    PYTHONHASHSEED when it is set; without it, 0.32 uses a fixed seed for the cryptographic
    algorithms and a random one for the others, and 0.26 a random one for all."""
    if os.environ.get("PYTHONHASHSEED") is not None:
        return True
    resolve = getattr(kv_cache_utils, "resolve_none_hash_seed", None)
    if resolve is None:  # vLLM 0.26: random for every algorithm
        return False
    from vllm.utils.hashing import get_hash_fn_by_name

    hash_fn = get_hash_fn_by_name(hash_algo)
    return bool(resolve(hash_fn) == resolve(hash_fn))  # a random seed differs each time
