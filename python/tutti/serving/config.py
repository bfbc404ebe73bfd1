# SPDX-License-Identifier: Apache-2.0
"""The connector's configuration (vLLM's ``kv_connector_extra_config``) parsed and checked
(``TuttiConfig``: keys, types, ranges, directories, capacity), and what both sides of a
connector derive from it and from the serving engine (``ServingContext``: the resolved
configuration, the store geometry, the rank, the namespace)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

from tutti.serving import ranks, remote_tier
from tutti.serving.fingerprint import FINGERPRINT_MODES, weights_fingerprint
from tutti.serving.keys import Namespace
from tutti.store import Geometry, engine_opts_text, engines

log = logging.getLogger(__name__)

KNOWN_KEYS = frozenset({
    "dirs", "dir", "capacity_gb", "capacity_bytes", "chunk_tokens", "engine", "durability",
    "staging_mb", "engine_opts", "namespace", "async_load", "async_save",
    "layerwise", "remote", "load_policy", "share_loads", "fingerprint",
})


@dataclass
class TuttiConfig:
    """``kv_connector_extra_config`` (docs/vllm.md, "Configuration")."""

    # A list of paths, or one list of paths per tensor-parallel rank (tutti/serving/ranks.py).
    dirs: list[Any]
    capacity_bytes: int
    chunk_tokens: int = 256
    # "auto": the store's choice: gpu-uring for KV in GPU memory, the CPU-driven engine for KV
    # in host memory and where gpu-uring cannot be set up or io_uring is refused (one log line
    # says why).
    engine: str = "auto"
    durability: str = "fast"
    staging_bytes: int = 0
    # The engine's options, key=value pairs separated by commas ("": its defaults); the engine
    # checks them when the store opens (include/tutti/engine.h).
    engine_opts: str = ""
    namespace: str = ""
    # None until resolved ("auto"): on for GPU KV unless layerwise is asked for
    # (ServingContext).
    async_load: bool | None = None
    # Saves written by a saver thread after the step returns; a block handed out again waits
    # for the save still reading it (docs/vllm.md, "How it works").
    async_save: bool = True
    # None until resolved ("auto"): off; only an explicit true loads layer by layer
    # (ServingContext).
    layerwise: bool | None = None
    remote: remote_tier.RemoteConfig | None = None  # the cross-node tier (docs/cluster.md)
    # "auto": a hit is loaded where reading it is faster than computing it, as measured while
    # serving (tutti/serving/planner.py); "always": every hit is loaded.
    load_policy: str = "auto"
    # With asynchronous loads and vLLM's prefix cache: a request whose hit another request is
    # loading waits for that load to land in vLLM's prefix cache instead of reading the same
    # chunks again (tutti/serving/scheduler.py).
    share_loads: bool = True
    # How much of the weights the namespace covers: "full", every byte; "sampled", windows of
    # each tensor (tutti/serving/fingerprint.py says what each sees).
    fingerprint: str = "full"
    capacity_key: str = "capacity_gb"  # the key the capacity was given with

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None, block_size: int) -> TuttiConfig:
        """Parse ``kv_connector_extra_config``; a bad value raises ``ValueError`` naming its
        key, what it must be and what it was."""
        extra = dict(extra or {})
        for old, new in RENAMED_KEYS.items():
            if old in extra:
                raise ValueError(f"TuttiConnector: \"{old}\" is now {new} (the engine's own "
                                 f"options)")
        unknown = sorted(set(extra) - KNOWN_KEYS)
        if unknown:
            raise ValueError(f"TuttiConnector: unknown kv_connector_extra_config keys {unknown}; "
                             f"known: {sorted(KNOWN_KEYS)}")
        if "dirs" in extra and "dir" in extra:
            raise ValueError("TuttiConnector: give \"dirs\" or \"dir\", not both")
        dirs_key = "dir" if "dir" in extra else "dirs"
        dirs = parse_dirs(extra.get(dirs_key), dirs_key)
        if "capacity_bytes" in extra and "capacity_gb" in extra:
            raise ValueError("TuttiConnector: give \"capacity_gb\" or \"capacity_bytes\", not "
                             "both")
        if "capacity_bytes" in extra:
            capacity = int(parse_number(extra["capacity_bytes"], "capacity_bytes", whole=True))
        elif "capacity_gb" in extra:
            capacity = int(parse_number(extra["capacity_gb"], "capacity_gb") * 2**30)
        else:
            raise ValueError("TuttiConnector: kv_connector_extra_config needs \"capacity_gb\" "
                             "(store size over all directories)")
        if capacity <= 0:
            key = "capacity_bytes" if "capacity_bytes" in extra else "capacity_gb"
            raise ValueError(f"TuttiConnector: \"{key}\" must be positive (the store's size "
                             f"over all directories), not {extra[key]!r}")
        chunk = max(256 // block_size, 1) * block_size
        if "chunk_tokens" in extra:
            chunk = int(parse_number(extra["chunk_tokens"], "chunk_tokens", whole=True))
        if chunk <= 0 or chunk % block_size:
            raise ValueError(f"TuttiConnector: \"chunk_tokens\" {chunk} must be a positive "
                             f"multiple of vLLM's block size {block_size}")
        engine = parse_choice(extra.get("engine", "auto"), "engine", tuple(engines()))
        durability = parse_choice(extra.get("durability", "fast"), "durability", DURABILITY)
        staging_mb = parse_number(extra.get("staging_mb", 0), "staging_mb")
        if staging_mb < 0:
            raise ValueError(f"TuttiConnector: \"staging_mb\" must be >= 0 (0: the store's "
                             f"default), not {extra['staging_mb']!r}")
        namespace = extra.get("namespace", "")
        if not isinstance(namespace, str):
            raise ValueError(f"TuttiConnector: \"namespace\" must be a string, not "
                             f"{namespace!r}")
        async_load = parse_auto_flag(extra.get("async_load", "auto"), "async_load")
        async_save = parse_flag(extra.get("async_save", True), "async_save")
        layerwise = parse_auto_flag(extra.get("layerwise", "auto"), "layerwise")
        if async_load and layerwise:
            # An asynchronous load completes while the request waits, outside any forward
            # pass: there is no layer of compute for it to hide behind.
            raise ValueError("TuttiConnector: async_load and layerwise exclude each other: "
                             "async_load loads while the request waits, before its forward "
                             "pass; layerwise loads during the forward pass. Set one of them")
        load_policy = parse_choice(extra.get("load_policy", "auto"), "load_policy",
                                   LOAD_POLICIES)
        share_loads = parse_flag(extra.get("share_loads", True), "share_loads")
        fingerprint = parse_choice(extra.get("fingerprint", "full"), "fingerprint",
                                   FINGERPRINT_MODES)
        return cls(dirs=dirs, capacity_bytes=capacity, chunk_tokens=chunk,
                   engine_opts=parse_engine_opts(extra.get("engine_opts", "")),
                   capacity_key="capacity_bytes" if "capacity_bytes" in extra else "capacity_gb",
                   engine=engine, durability=durability,
                   staging_bytes=int(staging_mb * 2**20), namespace=namespace,
                   async_load=async_load, async_save=async_save, layerwise=layerwise,
                   load_policy=load_policy, share_loads=share_loads, fingerprint=fingerprint,
                   remote=remote_tier.RemoteConfig.from_extra(extra.get("remote")))


DURABILITY = ("fast", "durable")
LOAD_POLICIES = ("auto", "always")


def parse_dirs(v: Any, key: str) -> list[Any]:
    """``dirs``: one path, a list of paths, or one list of paths per tensor-parallel rank."""
    if v is None or v == [] or v == "":
        raise ValueError(f"TuttiConnector: kv_connector_extra_config needs \"{key}\" (a list "
                         "of store directories, one per disk)")
    if isinstance(v, (str, PathLike)):
        v = [v]
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"TuttiConnector: \"{key}\" must be a list of directories (or one "
                         f"path), not {v!r}")
    out: list[Any] = []
    for d in v:
        if isinstance(d, (list, tuple)):
            if not d or not all(isinstance(x, (str, PathLike)) and str(x) for x in d):
                raise ValueError(f"TuttiConnector: \"{key}\" lists per rank must be non-empty "
                                 f"lists of paths, not {d!r}")
            out.append([str(x) for x in d])
        elif isinstance(d, (str, PathLike)) and str(d):
            out.append(str(d))
        else:
            raise ValueError(f"TuttiConnector: \"{key}\" must be a list of directories (or "
                             f"one path), and {d!r} in it is not a path")
    return out


def parse_number(v: Any, key: str, whole: bool = False) -> float:
    """A number (JSON's, or text that reads as one); ``whole``: an integer."""
    what = "a whole number" if whole else "a number"
    if isinstance(v, bool):
        raise ValueError(f"TuttiConnector: \"{key}\" must be {what}, not {v!r}")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"TuttiConnector: \"{key}\" must be {what}, not {v!r}") from None
    if x != x or x in (float("inf"), float("-inf")) or (whole and x != int(x)):
        raise ValueError(f"TuttiConnector: \"{key}\" must be {what}, not {v!r}")
    return x


RENAMED_KEYS = {"gpu_io_workers": "engine_opts \"workers=N\"",
                "gpu_io_sms": "engine_opts \"sms=N\""}


def parse_engine_opts(v: Any) -> str:
    """``engine_opts``: a string of key=value pairs separated by commas, or an object of them,
    as the library takes it; the engine checks keys and values when the store opens."""
    if isinstance(v, dict):
        try:
            return engine_opts_text(v)
        except OSError as e:
            raise ValueError(f"TuttiConnector: \"engine_opts\": {e.strerror}") from None
    if not isinstance(v, str):
        raise ValueError(f"TuttiConnector: \"engine_opts\" must be a string of key=value pairs "
                         f"separated by commas, or an object of them, not {v!r}")
    return v


def parse_choice(v: Any, key: str, choices: tuple[str, ...]) -> str:
    if not isinstance(v, str) or v not in choices:
        raise ValueError(f"TuttiConnector: \"{key}\" must be one of {', '.join(choices)}, "
                         f"not {v!r}")
    return v


def parse_auto_flag(v: Any, name: str) -> bool | None:
    """``layerwise``, ``async_load``: true, false, or "auto" (None, resolved by
    ServingContext from where the KV is and from each other)."""
    if isinstance(v, str) and v.lower() == "auto":
        return None
    return parse_flag(v, name, also=' or "auto"')


def parse_flag(v: Any, name: str, also: str = "") -> bool:
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("1", "true", "yes", "on"):
        return True
    if str(v).lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"TuttiConnector: {name} must be true or false{also}, not {v!r}")


class ServingContext:
    """What the scheduler side and the worker side of one connector derive from the
    configuration and from the serving engine: the configuration with its "auto" values
    resolved, the store geometry, this rank and its directories, the namespace. An engine's
    adapter builds it from the engine's configuration (tutti/vllm/context.py).

    ``namespace`` makes the namespace from the context once every check has passed (it may
    fingerprint the weights, whose cache lives in the store's directory: ``fingerprint``)."""

    def __init__(self, cfg: TuttiConfig, geo: Geometry,
                 namespace: Callable[[ServingContext], Namespace], *,
                 block_size: int, max_model_len: int, kv_on_gpu: bool, rank: int = 0,
                 tp: int = 1, pp: int = 1, num_blocks: int = 0,
                 layer_names: Sequence[str] = (), scheduler_opens_store: bool = True) -> None:
        self.block_size = block_size
        # With KV in GPU memory, loads complete while the request waits (async_load), through
        # gpu-uring (the store's "auto"): a load that fails inside a step crashes vLLM with and
        # without its asynchronous scheduling (docs/results.md, V2, V4; vLLM issues #49250 and
        # #34484: a request rewound after it ran), where a failed asynchronous load is
        # recomputed before the request runs (V6, V7), and asynchronous loads through
        # gpu-uring have the lower TTFT (SV11). "layerwise": true still chooses layer-by-layer
        # loads.
        self.kv_on_gpu = kv_on_gpu
        if cfg.async_load is None:
            cfg = dataclasses.replace(cfg, async_load=kv_on_gpu and cfg.layerwise is not True)
        if cfg.layerwise is None:
            cfg = dataclasses.replace(cfg, layerwise=False)
        self.cfg = cfg
        # Tensor parallelism (tutti/serving/ranks.py): each worker process opens the store of
        # its rank; the scheduler, in a process of its own, opens none and learns what every
        # rank holds from the workers' reports.
        self.tp = tp
        self.pp = pp
        self.global_rank = rank  # the engine's, for the remote tier
        self.rank = rank % tp
        ranks.check_disjoint(self.cfg.dirs, self.tp)
        if self.tp > 1 and self.cfg.remote is not None:
            raise ValueError("TuttiConnector: the remote tier (\"remote\") does not support "
                             "tensor parallelism yet")
        self.blocks_per_chunk = self.cfg.chunk_tokens // block_size
        self.geo = geo
        self._check_capacity(max_model_len)
        self.num_blocks = num_blocks
        # The engine's layers in the order of its configuration (layerwise loads compare the
        # order they are registered in with it).
        self.layer_names: list[str] = list(layer_names)
        # Whether the engine runs this connector's worker in the scheduler's process: only
        # then may the scheduler open the store (a store admits one process); otherwise it
        # learns what the store holds from the worker's reports (ranks.py).
        self.scheduler_opens_store = scheduler_opens_store
        self.ns_parts = namespace(self)
        self.ns = self.ns_parts.encode()

    def _check_capacity(self, max_model_len: int) -> None:
        """The store must hold at least one prompt of the longest length the engine admits: a
        store smaller than that evicts a prompt's first chunks while saving its last ones."""
        nr_dirs = len(self.dirs)
        slots = self.cfg.capacity_bytes // nr_dirs // self.geo.slot_bytes * nr_dirs
        needed = -(-max_model_len // self.cfg.chunk_tokens)
        if slots >= needed:
            return
        # Each directory holds an equal share of the slots.
        gib = -(-needed // nr_dirs) * nr_dirs * self.geo.slot_bytes / 2**30
        raise ValueError(
            f"TuttiConnector: \"{self.cfg.capacity_key}\" gives "
            f"{self.cfg.capacity_bytes / 2**30:.4g} GiB, "
            f"{slots} chunks of {self.cfg.chunk_tokens} tokens ({self.geo.slot_bytes} bytes "
            f"each) over {nr_dirs} director{'y' if nr_dirs == 1 else 'ies'}; the store must "
            f"hold at least one prompt of max_model_len {max_model_len} tokens: {needed} "
            f"chunks, {gib:.4g} GiB")

    @property
    def dirs(self) -> list[str]:
        """This rank's store directories."""
        return ranks.rank_dirs(self.cfg.dirs, self.rank)

    def fingerprint(self, model: str, revision: str | None, load_format: str,
                    download_dir: str | None) -> str | None:
        """The fingerprint of the model's weights (fingerprint.py), in the configured mode. Its
        digests are kept in rank 0's first store directory, which every process of the
        deployment (each rank, the scheduler) finds."""
        t0 = time.perf_counter()
        weights = weights_fingerprint(model, revision, load_format, download_dir,
                                      mode=self.cfg.fingerprint,
                                      cache_dir=ranks.rank_dirs(self.cfg.dirs, 0)[0])
        log.info("tutti: weights fingerprint %s (%s) in %.2f s", weights, self.cfg.fingerprint,
                 time.perf_counter() - t0)
        return weights

    def namespace(self, with_rank: bool = True) -> bytes:
        """What must not mix, as bytes. Without the rank: the namespace shared by every rank of
        a deployment (the remote tier's, whose keys and records carry the rank themselves)."""
        return self.ns_parts.encode(with_rank)
