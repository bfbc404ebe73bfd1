# SPDX-License-Identifier: Apache-2.0
"""What the scheduler side tells the worker side every step (``StepPlan``: the loads, the saves
and the blocks handed out), whatever carries it between them (vLLM: the connector metadata it
sends with the scheduler's output, tutti/vllm/data.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
class StepPlan:
    """One step's work for the worker side."""

    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    resync: set[int] = field(default_factory=set)  # ranks asked to list their whole store
    compute_tokens: int = 0  # tokens the step computes (the layerwise pipeline plans with it)
    # Blocks this step's schedule gave to requests (async_save): blocks the engine freed and
    # handed out again, which the step's loads and forward may write. The worker waits for the
    # saves still reading any of them before it lets them (saver.py).
    new_blocks: list[int] = field(default_factory=list)
