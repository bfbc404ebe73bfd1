# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's scheduler side: the serving core's scheduler (tutti/serving/scheduler.py)
under vLLM's names, reading vLLM's requests, block lists, scheduler output and connector output.

- ``get_num_new_matched_tokens`` is the core's lookup of a prompt's stored prefix.
- ``update_state_after_alloc`` turns a hit into a load of the blocks vLLM allocated.
- ``build_connector_meta`` sends the worker this step's loads and the chunks that became
  complete (to save), and the blocks the step handed out.
- ``update_connector_output`` folds in the workers' store reports, their load and compute
  measurements, finished asynchronous loads and failed loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import vllm
from vllm.v1.request import Request, RequestStatus

from tutti.serving.scheduler import Scheduled, SchedulerCore
from tutti.vllm import compat
from tutti.vllm.context import ConnectorContext
from tutti.vllm.data import TuttiConnectorMetadata, TuttiWorkerMetadata
from tutti.vllm.log import log
from tutti.vllm.metrics import TuttiConnectorStats

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput


def waiting_for_load(request: Request) -> bool:
    """Whether vLLM still holds the request back for its asynchronous load."""
    return request.status == RequestStatus.WAITING_FOR_REMOTE_KVS


class TuttiScheduler(SchedulerCore[Request]):
    """The scheduler side of one connector."""

    def __init__(self, ctx: ConnectorContext) -> None:
        cc = ctx.vllm_config.cache_config
        super().__init__(ctx, waiting_for_load,
                         engine_prefix_cache=bool(getattr(cc, "enable_prefix_caching", False)))
        algo = str(getattr(cc, "prefix_caching_hash_algo", "sha256"))
        if not compat.hashes_survive_restarts(algo):
            log.warning("tutti: vLLM %s seeds its prefix hashes (%s) at random in every process "
                        "unless PYTHONHASHSEED is set: what this server stores is not found "
                        "again after a restart. Set PYTHONHASHSEED to one value for every run",
                        vllm.__version__, algo)

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        return self.lookup(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        self.allocated(request, blocks.get_block_ids()[0] if num_external_tokens else (),
                       num_external_tokens)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        self.worker_output(meta if isinstance(meta, TuttiWorkerMetadata) else None,
                           connector_output.finished_recving or (),
                           connector_output.invalid_block_ids)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> TuttiConnectorMetadata:
        scheduled = scheduler_output.num_scheduled_tokens
        runs = [Scheduled(new.req_id, list(new.block_ids[0]),
                          new.num_computed_tokens + scheduled.get(new.req_id, 0), new=True)
                for new in scheduler_output.scheduled_new_reqs]
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            runs.append(Scheduled(req_id, list(new_ids[0]) if new_ids else [],
                                  cached.num_computed_tokens[i] + scheduled.get(req_id, 0),
                                  resumed=req_id in cached.resumed_req_ids))
        return self.plan_step(
            TuttiConnectorMetadata(), runs,
            int(getattr(scheduler_output, "total_num_scheduled_tokens", 0)))

    def request_finished(self, request: Request,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self.finished(request.request_id)
        return False, None

    def take_stats(self) -> TuttiConnectorStats | None:
        counts = self.take_counts()
        return None if counts is None else TuttiConnectorStats(data=counts.data)

    def shutdown(self) -> None:
        self.close()
