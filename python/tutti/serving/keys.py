# SPDX-License-Identifier: Apache-2.0
"""What the scheduler side tells the worker side every step (``TuttiConnectorMetadata``, sent by
vLLM with the scheduler's output), and the store keys of a prompt's chunks."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

KEY_BYTES = 32


def chunk_key(block_hash: bytes) -> bytes:
    """The store key of the chunk ending with the block of ``block_hash``."""
    return hashlib.blake2b(bytes(block_hash), digest_size=KEY_BYTES).digest()


def chunk_keys(block_hashes: Sequence[bytes], nr_blocks: int, blocks_per_chunk: int) -> list[bytes]:
    """Keys of the chunks holding the first ``nr_blocks`` blocks (the last may be partial).

    vLLM chains block hashes over the whole prefix, so the hash of a chunk's last block names
    the prefix up to that chunk."""
    keys = [chunk_key(block_hashes[end - 1])
            for end in range(blocks_per_chunk, nr_blocks + 1, blocks_per_chunk)]
    if nr_blocks % blocks_per_chunk:
        keys.append(chunk_key(block_hashes[nr_blocks - 1]))
    return keys


@dataclass
class LoadSpec:
    """One request's load: chunks [first_chunk, len(keys)) of the key chain into ``block_ids``,
    skipping the first ``skip_blocks`` blocks of the first chunk."""

    req_id: str
    keys: list[bytes]
    first_chunk: int
    skip_blocks: int
    block_ids: list[int]
    remote_from: int = -1  # chunks from this index on come from the remote tier (-1: none)


@dataclass
class SaveSpec:
    """One request's save: chunks [first_chunk, len(keys)) of the key chain from
    ``block_ids``."""

    req_id: str
    keys: list[bytes]
    first_chunk: int
    block_ids: list[int]


@dataclass
class TuttiConnectorMetadata(KVConnectorMetadata):
    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    resync: set[int] = field(default_factory=set)  # ranks asked to list their whole store
    compute_tokens: int = 0  # tokens the step computes (the layerwise pipeline plans with it)
    # Blocks this step's schedule gave to requests (async_save): blocks vLLM freed and handed
    # out again, which the step's loads and forward may write. The worker waits for the saves
    # still reading any of them before it lets them.
    new_blocks: list[int] = field(default_factory=list)
