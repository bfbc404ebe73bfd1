# SPDX-License-Identifier: Apache-2.0
"""The serving core's messages as vLLM carries them: ``TuttiConnectorMetadata`` (scheduler ->
workers, sent by vLLM with the scheduler's output each step) is the core's ``StepPlan``, and
``TuttiWorkerMetadata`` (workers -> scheduler) its ``WorkerReport``, which vLLM folds over the
workers of a step with ``aggregate`` (tutti/serving/ranks.py)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)

from tutti.serving.ranks import WorkerReport
from tutti.serving.steps import StepPlan


@dataclass
class TuttiConnectorMetadata(StepPlan, KVConnectorMetadata):
    """One step's loads, saves and blocks handed out, for every worker."""


@dataclass
class TuttiWorkerMetadata(WorkerReport, KVConnectorWorkerMetadata):
    """Worker -> scheduler: the store reports of the ranks of one step, and their load and
    compute measurements, keyed by rank."""

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if isinstance(other, WorkerReport):
            self.merge(other)
        return self
