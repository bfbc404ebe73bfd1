# SPDX-License-Identifier: Apache-2.0
"""The serving core: what a serving engine's KV connector needs from Tutti, whichever engine it
is. Nothing here imports an engine (``make style`` checks it); an engine's adapter
(``tutti/vllm/`` for vLLM) turns the engine's calls and types into these and back
(docs/design.md, "The serving core").

- ``config.py``: the connector's configuration parsed and checked (``TuttiConfig``), and
  ``ServingContext``, what both sides derive from it and from the engine;
- ``keys.py``: chunk keys from the engine's chained block hashes, and the ``Namespace``;
- ``steps.py``: what the scheduler side hands the worker side each step (``StepPlan``);
- ``scheduler.py``: the scheduler side (lookups, loads and saves planned per step), with
  ``planner.py``, the load plan;
- ``worker.py``: the worker side (loads and saves), with ``saver.py`` (the saver thread and its
  block fence) and ``layerwise.py`` (layer-by-layer loads);
- ``ranks.py``: tensor parallelism (a store per rank; the scheduler's view of them);
- ``stores.py``: the store and remote handles a process shares; ``remote_tier.py``: the remote
  tier's configuration, handle and cost rule;
- ``fingerprint.py``: the weights in the namespace; ``counters.py``: what each side counts.

The core logs to the ``tutti.serving`` logger tree (``logging``); an adapter may route it into
its engine's logs (``tutti/vllm/log.py``)."""

LOGGER_NAME = "tutti.serving"
