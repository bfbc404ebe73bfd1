# SPDX-License-Identifier: Apache-2.0
"""One vLLM process of the end-to-end tests: serve token-id prompts greedily, with or without
TuttiConnector, and write the generated tokens and the connector's metrics as JSON.

Usage: serve_prompts.py [--tp N] MODEL PROMPTS.json OUT.json
                        [STORE_DIR [async|sync|layerwise|async-prefix-cache [REMOTE.json]]]
(REMOTE.json: the connector's "remote" configuration, docs/cluster.md; --tp N: tensor
parallelism over N worker processes, STORE_DIR then naming each rank's directory with {rank};
async-prefix-cache: asynchronous loads with vLLM's prefix cache on, which is off otherwise so
that every hit comes from the store)
"""

import json
import os
import sys


def main(model, prompts_path, out_path, store=None, mode="sync", remote=None, tp=1):
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    kv = None
    if store:
        kv = KVTransferConfig(
            kv_connector="TuttiConnector",
            # An installed package registers the connector with vLLM (tutti.vllm.plugin), and
            # the test of an installed wheel names it only; from the source tree, by module.
            kv_connector_module_path=(None if os.environ.get("TUTTI_TEST_INSTALLED")
                                      else "tutti.vllm.connector"),
            kv_role="kv_both",
            kv_load_failure_policy="recompute",
            kv_connector_extra_config={"dirs": [store], "capacity_gb": 0.25,
                                       "chunk_tokens": 64, "async_load": mode.startswith("async"),
                                       "layerwise": mode == "layerwise"},
        )
        if remote:
            kv.kv_connector_extra_config["remote"] = json.load(open(remote))
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
              max_model_len=1024, max_num_seqs=8, block_size=32, seed=0,
              enable_prefix_caching=mode == "async-prefix-cache", disable_log_stats=False,
              kv_transfer_config=kv,
              tensor_parallel_size=tp)
    prompts = json.load(open(prompts_path))
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, detokenize=False)
    if mode == "layerwise":
        # One prompt at a time, so that several steps load (each through the pipeline).
        outs = [o for p in prompts for o in llm.generate([{"prompt_token_ids": p}], params)]
    else:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    metrics = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:tutti") or m.name in ("vllm:prompt_tokens",):
            metrics[m.name] = metrics.get(m.name, 0) + getattr(m, "value", 0)
    import tutti
    from tutti import _lib

    # Where the package and the library the connector used came from.
    where = {"package": tutti.__file__, "library": _lib._lib._name if _lib._lib else None}
    json.dump({"tokens": [list(o.outputs[0].token_ids) for o in outs], "metrics": metrics,
               "tutti": where, "plan": plan_rates(llm)}, open(out_path, "w"))


def plan_rates(llm):
    """The rates the scheduler's load plan measured (tutti/serving/planner.py), where the engine
    core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0); None elsewhere."""
    core = getattr(getattr(llm.llm_engine, "engine_core", None), "engine_core", None)
    connector = getattr(getattr(core, "scheduler", None), "connector", None)
    planner = getattr(getattr(connector, "scheduler", None), "planner", None)
    if planner is None:
        return None
    return {"read_bytes_per_s": planner.read_bytes_per_s(),
            "compute_tokens_per_s": planner.compute_tokens_per_s()}


if __name__ == "__main__":
    argv = sys.argv[1:]
    tp = 1
    if argv[:1] == ["--tp"]:
        tp, argv = int(argv[1]), argv[2:]
    main(*argv, tp=tp)
