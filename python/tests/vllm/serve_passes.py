# SPDX-License-Identifier: Apache-2.0
"""One vLLM process of the output matrix (outputs_matrix.py): serve sets of token-id prompts
greedily, one prompt at a time, and record per pass the generated tokens and how the
connector's and vLLM's prefix-cache counters moved.

Usage: serve_passes.py SPEC.json
SPEC: {"engine_args": {...LLM keyword arguments...}, "connector": null or the connector's
kv_connector_extra_config, "reinit_seed": int or null (weights re-drawn in the worker, for
load_format="dummy"), "sets": {"P": [[ids...], ...], ...},
"actions": ["P", "reset", "P", ...], "max_tokens": int, "out": path}

The result file is rewritten after every action, so that a process killed at a deadline still
leaves what it did. One prompt at a time keeps every step's batch the same from one process to
the next: vLLM's kernels are not batch-invariant, and the comparison is about the KV.
"""

import inspect
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import local_model  # noqa: E402

COUNTER_PREFIXES = ("vllm:tutti_", "vllm:prefix_cache_", "vllm:external_prefix_cache_")


def counters():
    """vLLM's Prometheus counters in this process, as floats (vLLM's own reader rounds them to
    integers, which loses the connector's seconds)."""
    from prometheus_client import REGISTRY

    out = {}
    for fam in REGISTRY.collect():
        if fam.type != "counter" or not fam.name.startswith(COUNTER_PREFIXES):
            continue
        for s in fam.samples:
            if s.name.endswith("_total"):
                out[s.name[:-6]] = out.get(s.name[:-6], 0.0) + s.value
    return out


def delta(after, before):
    return {k: round(v - before.get(k, 0.0), 6) for k, v in after.items()}


def record_every_step(llm):
    """Pass every step's stats to vLLM's stat loggers. vLLM 0.26's ``LLMEngine.step`` passes
    them only for steps that produced request outputs (later releases pass every step's), so
    the counters of a step that only loaded KV, or prefilled part of a prompt, were dropped:
    the connector's hit and load-error counts and vLLM's own prefix-cache counts read low. Does
    nothing where the engine passes them itself."""
    engine = llm.llm_engine
    if getattr(engine, "logger_manager", None) is None:
        return
    try:
        gated = "len(outputs.outputs) > 0" in inspect.getsource(type(engine).step)
    except (OSError, TypeError):
        gated = False
    if not gated:
        return
    core = engine.engine_core
    get_output = core.get_output

    def get_output_recording_stats():
        outputs = get_output()
        if outputs.scheduler_stats is not None and not outputs.outputs:
            engine.logger_manager.record(scheduler_stats=outputs.scheduler_stats,
                                         iteration_stats=None)
        return outputs

    core.get_output = get_output_recording_stats


def connector_info():
    """What the worker's connector runs with (the engine core is in this process): its engine,
    layerwise flag and where the KV lives. Empty when it cannot be seen."""
    try:
        from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group
    except ImportError:
        return {}
    if not has_kv_transfer_group():
        return {}
    conn = get_kv_transfer_group()
    # The connector keeps its worker-side state on itself or on a worker object of its own.
    parts = [conn, getattr(conn, "worker", None), getattr(conn, "ctx", None)]

    def find(*names):
        for part in parts:
            for n in names:
                v = getattr(part, n, None) if part is not None else None
                if v is not None:
                    return v
        return None

    cfg = find("cfg")
    info = {"class": type(conn).__name__}
    for k in ("engine", "layerwise", "async_load", "chunk_tokens"):
        if cfg is not None and hasattr(cfg, k):
            info[k] = getattr(cfg, k)
    # What "auto" chose: the worker's engine for this KV (Store.engine_for).
    chosen = getattr(getattr(conn, "worker", None), "engine", None)
    if isinstance(chosen, str):
        info["store_engine"] = chosen
    mem = find("kv_mem", "_kv_mem")
    if isinstance(mem, str):
        info["kv_mem"] = mem
    return info


def main(spec_path):
    spec = json.loads(Path(spec_path).read_text())
    out_path = Path(spec["out"])
    result = {"passes": [], "done": False}

    def save():
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, out_path)

    save()
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    kv = None
    if spec["connector"] is not None:
        kv = KVTransferConfig(kv_connector="TuttiConnector",
                              kv_connector_module_path="tutti.vllm.connector",
                              kv_role="kv_both", kv_load_failure_policy="recompute",
                              kv_connector_extra_config=spec["connector"])
    t0 = time.monotonic()
    llm = LLM(kv_transfer_config=kv, **spec["engine_args"])
    record_every_step(llm)
    if spec.get("reinit_seed") is not None:
        llm.apply_model(partial(local_model.reinit_weights, seed=spec["reinit_seed"]))
    result["startup_s"] = round(time.monotonic() - t0, 2)
    result["connector"] = connector_info()
    save()
    params = SamplingParams(max_tokens=spec["max_tokens"], temperature=0, ignore_eos=True,
                            detokenize=False)
    for action in spec["actions"]:
        t = time.monotonic()
        if action == "reset":
            result["passes"].append({"action": "reset", "ok": bool(llm.reset_prefix_cache())})
            save()
            continue
        before = counters()
        tokens = []
        for p in spec["sets"][action]:
            o = llm.generate([{"prompt_token_ids": p}], params, use_tqdm=False)[0]
            tokens.append(list(o.outputs[0].token_ids))
        result["passes"].append({"action": action, "tokens": tokens,
                                 "counters": delta(counters(), before),
                                 "seconds": round(time.monotonic() - t, 3)})
        save()
    result["done"] = True
    save()


if __name__ == "__main__":
    main(sys.argv[1])
