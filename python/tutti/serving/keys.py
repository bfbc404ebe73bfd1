# SPDX-License-Identifier: Apache-2.0
"""The store keys of a prompt's chunks, and the namespace that keeps apart what must not mix.

A key names a prefix: the serving engine hashes each block of a prompt chained over the whole
prefix before it (vLLM's block hashes; SGLang's page hashes are chained the same way), so the
hash of a chunk's last block names the prefix up to that chunk."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from tutti.store import Geometry

KEY_BYTES = 32


def chunk_key(block_hash: bytes) -> bytes:
    """The store key of the chunk ending with the block of ``block_hash``."""
    return hashlib.blake2b(bytes(block_hash), digest_size=KEY_BYTES).digest()


def chunk_keys(block_hashes: Sequence[bytes], nr_blocks: int, blocks_per_chunk: int) -> list[bytes]:
    """Keys of the chunks holding the first ``nr_blocks`` blocks (the last may be partial).

    The engine chains block hashes over the whole prefix, so the hash of a chunk's last block
    names the prefix up to that chunk."""
    keys = [chunk_key(block_hashes[end - 1])
            for end in range(blocks_per_chunk, nr_blocks + 1, blocks_per_chunk)]
    if nr_blocks % blocks_per_chunk:
        keys.append(chunk_key(block_hashes[nr_blocks - 1]))
    return keys


@dataclass(frozen=True)
class Namespace:
    """Everything KV depends on besides the tokens: KV stored under one namespace is never
    served under another (a store of another namespace is replaced by an empty one). An
    engine's adapter fills every field from its configuration."""

    engine: str  # the serving engine, as the adapter names it ("vllm")
    engine_version: str  # its release, major.minor: block hashes and layouts change with it
    model: str  # the model's name or path
    revision: str | None
    weights: str | None  # the weights' fingerprint (fingerprint.py); None: no local folder
    dtype: str  # the KV's element type, as the engine names it
    geo: Geometry  # layers, KV heads, head size, block tokens, page bytes
    layout: str | None  # the engine's arrangement of a page's bytes
    device: str  # where the KV lives ("cuda", "cpu")
    rank: int  # tensor-parallel rank: each holds its share of the heads
    tp: int
    pp: int
    hash_algo: str | None  # the algorithm of the block hashes the keys derive from
    user: str = ""  # the configuration's "namespace"
    quant: str | None = None  # the quantization of the weights
    overrides: str | None = None  # a digest of the engine's overrides of the model's config
    scheme: int = 2  # the adapter's key scheme: a new one makes every stored chunk a miss

    def encode(self, with_rank: bool = True) -> bytes:
        """The namespace as the store keeps it. Without the rank: the namespace shared by every
        rank of a deployment (the remote tier's, whose keys and records carry the rank)."""
        g = self.geo
        # The weights: their fingerprint, and the model's name where they have none (the
        # engine loads them from no folder here) or are random.
        named = self.weights is None or self.weights.startswith("dummy")
        parts = [
            f"tutti-{self.engine}/{self.scheme}",
            f"model={self.model}@{self.revision}" if named else "",
            f"weights={self.weights}" if self.weights is not None else "",
            f"quant={self.quant}" if self.quant else "",
            f"overrides={self.overrides}" if self.overrides else "",
            f"dtype={self.dtype}",
            f"block={g.block_tokens}",
            f"kv={g.nr_layers}x{g.nr_kv_heads}x{g.head_dim}",
            f"page={g.layer_block_bytes}",
            f"layout={self.layout}",
            f"device={self.device}",
            f"tp={self.rank if with_rank else '*'}/{self.tp}",
            f"pp={self.pp}",
            f"hash={self.hash_algo}",
            f"{self.engine}={self.engine_version}",
            f"user={self.user}",
        ]
        return "|".join(p for p in parts if p).encode()
