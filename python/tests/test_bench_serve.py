# SPDX-License-Identifier: Apache-2.0
"""bench/serve: the trace's shape (documents shared by their questions, content independent of
the rate, Poisson arrivals), the LMCache buffer rule, the refusal of LMCache's in-process
connector on vLLM's packed K/V layout, LMCache's multiprocess configuration and the server
beside the engine, the table's SLO arithmetic and output check, and the CPU smoke run end to
end (a tiny model on vLLM's CPU build: vLLM alone and with Tutti, one JSON line per system and
rate, hits from the tier, Tutti's probe outputs identical to vLLM alone's)."""

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVE = Path(__file__).resolve().parents[2] / "bench" / "serve"
sys.path.insert(0, str(SERVE))
import systems  # noqa: E402
import table  # noqa: E402
import tier_bandwidth  # noqa: E402
from workload import Trace  # noqa: E402


def test_questions_share_their_document_prefix_and_the_rate_changes_only_the_times():
    t = Trace(docs=6, requests=40, seed=3)
    assert len(t.requests) == 40
    by_doc = {}
    for r in t.requests:
        p = t.prompt(r)
        assert p[:len(t.docs[r["doc_id"]])] == t.docs[r["doc_id"]]
        assert 8192 <= len(t.docs[r["doc_id"]]) - 70 <= 32768  # the band, plus the template
        by_doc.setdefault(r["doc_id"], []).append(r["suffix"])
    assert 1 < len(by_doc) <= 6
    assert any(len(v) > 1 for v in by_doc.values())  # questions reuse a document
    suffixes = [tuple(s) for v in by_doc.values() for s in v]
    assert len(set(suffixes)) == len(suffixes)  # every question is its own
    assert all(lo >= 1000 and lo < 100000 for p in t.docs.values() for lo in p)
    again = Trace(docs=6, requests=40, seed=3)
    assert again.docs == t.docs and again.requests == t.requests
    a1, a4 = t.arrivals(1.0), t.arrivals(4.0)
    assert a1[0] == 0 and all(abs(x - 4 * y) < 1e-9 for x, y in zip(a1, a4, strict=True))
    gaps = [b - a for a, b in zip(a1, a1[1:], strict=False)]
    assert 0.5 < statistics.fmean(gaps) < 1.6  # exponential gaps of mean 1 (Poisson)
    assert Trace(docs=6, requests=40, seed=4).docs != t.docs
    with pytest.raises(ValueError, match="no leval/qa document"):
        Trace(docs_min=500000, docs_max=600000)


def test_warmup_sends_each_document_once_and_scale_shrinks_lengths():
    t = Trace(docs=5, requests=30, scale=1 / 32, vocab=(1, 509), output="reference")
    w = t.warmup_requests()
    assert sorted(r["doc_id"] for r in w) == sorted(t.docs)
    assert all(len(p) <= (32768 + 70) / 32 + 1 for p in t.docs.values())
    assert all(1 <= x < 509 for p in t.docs.values() for x in p)
    assert all(r["output_tokens"] >= 1 for r in t.requests)
    loogle = Trace(dataset="loogle", docs_max=60000, docs=4, requests=10)
    assert loogle.config["preset"] == "longdep_qa" and len(loogle.requests) == 10


def test_each_rate_replays_about_a_window_of_the_trace_and_at_least_a_minimum():
    import run_system

    t = Trace(docs=12, requests=40)
    reqs, arr = run_system.requests_at(t, 1.0, 8, 12)
    assert reqs == t.requests[:12] and arr == t.arrivals(1.0)[:12]
    reqs, arr = run_system.requests_at(t, 4.0, 8, 12)
    assert len(reqs) == 32 and arr == t.arrivals(4.0)[:32]
    reqs, _ = run_system.requests_at(t, 100.0, 8, 12)
    assert reqs == t.requests  # never more than the trace


def test_lmcache_min_buffer_holds_the_longest_prefix_in_whole_chunks():
    kvpt = 131072  # Llama-3-8B, bf16
    # 31249 tokens: 123 chunks of 256 tokens, 32 MiB each.
    gb = systems.lmcache_min_cpu_gb(31249, kvpt)
    assert 123 * 32 / 1024 < gb <= 123 * 32 / 1024 * 1.06 + 0.1
    assert gb < systems.LMCACHE_DEFAULT_CPU_GB


class PackedBackend:  # vLLM 0.26's FLASH_ATTN: (blocks, heads, block size, 2 x head size)
    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size):
        return (num_blocks, num_kv_heads, block_size, 2 * head_size)


class SplitBackend:  # vLLM 0.25's FLASH_ATTN: (2, blocks, block size, heads, head size)
    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size):
        return (2, num_blocks, block_size, num_kv_heads, head_size)


def test_lmcache_in_process_refused_on_packed_kv_layouts():
    assert systems.kv_layout_packed(PackedBackend) is True
    assert systems.kv_layout_packed(SplitBackend) is False
    assert systems.kv_layout_packed(object) is None  # no such method: unknown
    why = systems.lmcache_v1_refusal(PackedBackend, vllm_version="0.26.0")
    assert "#4463" in why and "lmcache-mp" in why and "--allow-lmcache-v1" in why
    assert systems.lmcache_v1_refusal(SplitBackend, vllm_version="0.26.0") is None
    # A layout that cannot be read: vLLM's version decides (packed from 0.26 on).
    assert "#4463" in systems.lmcache_v1_refusal(object, vllm_version="0.26.0")
    assert systems.lmcache_v1_refusal(object, vllm_version="0.25.1") is None
    assert systems.unavailable("recompute", "cpu") is None
    assert systems.unavailable("lmcache-mp", "cpu")  # not installed, or no GPU


def test_lmcache_mp_server_and_connector_config(tmp_path):
    summary = {"requests": 40, "documents": 12, "unique_kv_gib": 30.0, "prefix_max": 32838}
    kvpt = 131072
    kv, env, info = systems.config("lmcache-mp", tmp_path, tmp_path, summary, kvpt, 6001)
    assert kv["kv_connector"] == "LMCacheMPConnector" and kv["kv_role"] == "kv_both"
    assert kv["kv_connector_extra_config"] == {"lmcache.mp.host": "tcp://127.0.0.1",
                                               "lmcache.mp.port": 6001}
    assert env["LMCACHE_TRACK_USAGE"] == "false"
    argv = systems.lmcache_server_args("lmcache-mp", tmp_path, summary, kvpt, 6001)
    assert argv[:2] == ["-m", "lmcache.v1.multiprocess.server"]
    opt = {k: v for k, v in zip(argv, argv[1:], strict=False) if k.startswith("--")}
    assert opt["--port"] == "6001" and opt["--host"] == "127.0.0.1"
    assert opt["--chunk-size"] == "256" and opt["--eviction-policy"] == "LRU"
    # L1: LMCache's 5 GB, which holds the longest prefix (129 chunks of 32 MiB).
    assert float(opt["--l1-size-gb"]) == info["cpu_buffer_gb"] == 5.0
    assert opt["--shm-name"] == "" and opt["--supported-transfer-mode"] == "lmcache_driven"
    l2 = json.loads(opt["--l2-adapter"])
    assert l2 == {"type": "fs_native", "base_path": str(tmp_path), "use_odirect": True,
                  "max_capacity_gb": systems.store_gb(summary, kvpt)}
    assert systems.lmcache_server_args("tutti", tmp_path, summary, kvpt, 6001) is None
    assert "lmcache-mp" in systems.USES_STORAGE
    # lmcache-mp-large: the same server with an L1 of half the trace's KV.
    kv_l, _, info_l = systems.config("lmcache-mp-large", tmp_path, tmp_path, summary, kvpt, 6001)
    assert kv_l == kv and "lmcache-mp-large" in systems.USES_STORAGE
    argv = systems.lmcache_server_args("lmcache-mp-large", tmp_path, summary, kvpt, 6001)
    opt_l = {k: v for k, v in zip(argv, argv[1:], strict=False) if k.startswith("--")}
    assert float(opt_l["--l1-size-gb"]) == info_l["cpu_buffer_gb"] == 15.0
    assert {k: v for k, v in opt_l.items() if k != "--l1-size-gb"} == \
        {k: v for k, v in opt.items() if k != "--l1-size-gb"}


def test_server_beside_the_engine_is_awaited_and_stopped():
    import run_system

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listen = ("import socket, time; s = socket.socket(); "
              f"time.sleep(1); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    t0 = time.monotonic()
    proc = run_system.start_server(["-c", listen], "127.0.0.1", port, timeout=30)
    assert proc.poll() is None and time.monotonic() - t0 < 30
    assert run_system.stop_server(proc) != 0 and proc.poll() is not None  # SIGTERM
    with pytest.raises(RuntimeError, match="exited with 3"):
        run_system.start_server(["-c", "import sys; sys.exit(3)"], "127.0.0.1", port)
    with pytest.raises(TimeoutError):
        run_system.start_server(["-c", "import time; time.sleep(60)"], "127.0.0.1", port,
                                timeout=1)


def test_probe_prompts_are_whole_chunks_of_their_own_content():
    import run_system

    probe = {"requests": 2, "prefix_tokens": 1100, "suffix_tokens": 64, "output_tokens": 8,
             "seed": 7, "vocab": [1000, 100000]}
    prompts = run_system.probe_prompts(probe)
    assert len(prompts) == 2 and prompts == run_system.probe_prompts(dict(probe))
    (p0, s0), (p1, s1) = prompts
    assert len(p0) == len(p1) == 1024 and len(s0) == 64 and s0 == s1
    assert p0[:256] != p1[:256] and all(1000 <= x < 100000 for x in p0 + s0)
    t = Trace(docs=6, requests=40, seed=3)
    assert all(p0[:256] != d[:256] for d in t.docs.values())


def test_table_output_check_against_vllm_alone():
    probe = {"requests": 2, "prefix_tokens": 256}

    def row(system, storage, tokens, cached=(256, 256), weights=None):
        return {"system": system, "storage": storage, "model": "tiny", "probe": probe,
                "weights": weights, "probes": [{"prefix_tokens": 256, "cached": c, "tokens": t}
                                               for t, c in zip(tokens, cached, strict=True)]}
    ref = [[1, 2], [3, 4]]
    data = {"probes": {("recompute", "none"): row("recompute", "none", ref),
                       ("tutti", "emulated"): row("tutti", "emulated", ref),
                       ("offload-cpu", "none"): row("offload-cpu", "none", ref, (256, 0)),
                       ("lmcache-mp", "emulated"): row("lmcache-mp", "emulated", [[1, 2], [3, 5]]),
                       ("lmcache", "emulated"): row("lmcache", "emulated", ref, weights="dummy")}}
    check = lambda s: table.output_check(data, s, "emulated")  # noqa: E731
    assert check("recompute") == "reference"
    assert check("tutti") == "same (2 of 2)"
    assert check("offload-cpu") == "same (1 of 2), 1 not from the tier"
    assert check("lmcache-mp") == "DIFFERENT in 1 of 2"
    assert check("lmcache") == "no reference"  # other weights
    assert check("lmcache-min") == "-"
    data["probes"][("recompute", "none")] = row("recompute", "none", [[1, 2], [1, 2]])
    data["probes"][("tutti", "emulated")] = row("tutti", "emulated", [[1, 2], [1, 2]])
    assert check("tutti") == "same (2 of 2) (vLLM alone's outputs do not depend on the prefix: " \
        "weak)"


def test_table_max_rate_and_fitted_slo(tmp_path):
    def row(system, rate, p90, storage="emulated", unfinished=0):
        return {"system": system, "storage": storage, "phase": "rate", "rate": rate,
                "ttft_p50_s": p90 / 2, "ttft_p90_s": p90, "ttft_p99_s": p90, "requests": 10,
                "completed": 10 - unfinished, "unfinished": unfinished, "cpu_cores": 1.0,
                "prompt_tokens": 1000, "gpu_hit_tokens": 100, "tier_hit_tokens": 800}
    lines = [row("tutti", 1, 0.2), row("tutti", 2, 0.4), row("tutti", 4, 1.5),
             row("lmcache", 1, 0.9), row("lmcache", 2, 3.0),
             row("recompute", 1, 0.8, "none"), row("recompute", 2, 0.9, "none", unfinished=1),
             {"system": "recompute", "storage": "none", "phase": "warmup",
              "prefill_ttft_p50_s": 0.5, "trace": {}, "trace_summary": {}},
             {"system": "tutti", "storage": "emulated", "phase": "warmup",
              "prefill_ttft_p50_s": 0.7, "trace": {}, "trace_summary": {}}]
    p = tmp_path / "serve.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    data = table.load([p])
    assert table.fitted_slo(data) == 0.5  # recompute's prefill on an idle engine
    per = lambda s: [r for r in data["rows"] if r["system"] == s]  # noqa: E731
    assert table.max_rate(per("tutti"), 1.0) == 2
    assert table.max_rate(per("tutti"), 0.5) == 2
    assert table.max_rate(per("lmcache"), 1.0) == 1
    assert table.max_rate(per("recompute"), 1.0) == 1  # rate 2 left a request unfinished
    assert table.max_rate(per("lmcache"), 0.5) is None
    assert table.systems_of(data, "emulated") == ["tutti", "lmcache", "recompute"]


def test_table_takes_the_median_of_a_rates_rounds(tmp_path):
    def row(rate, rnd, p50, p90, unfinished=0):
        return {"system": "tutti", "storage": "emulated", "phase": "rate", "rate": rate,
                "round": rnd, "ttft_p50_s": p50, "ttft_p90_s": p90, "ttft_p99_s": p90,
                "requests": 10, "completed": 10 - unfinished, "unfinished": unfinished,
                "cpu_cores": float(rnd + 1), "prompt_tokens": 1000, "gpu_hit_tokens": 100,
                "tier_hit_tokens": 800}
    lines = [row(1, 0, 0.10, 0.5), row(1, 1, 0.30, 0.9), row(1, 2, 0.20, 1.4),
             # a round that left a request unfinished has no p90: infinitely slow
             row(2, 0, 0.40, 0.8), row(2, 1, 0.50, None, unfinished=1), row(2, 2, 0.45, 1.2),
             row(4, 0, 0.9, 3.0),
             {"system": "tutti", "storage": "emulated", "phase": "warmup", "model": "tiny",
              "device": "cpu", "prefill_ttft_p50_s": 0.7,
              "trace": {"dataset": "leval", "preset": "qa", "docs_min": 1, "docs_max": 2,
                        "output": "fixed:4", "seed": 0},
              "trace_summary": {"requests": 3, "documents": 1, "prompt_mean": 1,
                                "prompt_max": 2, "unique_kv_gib": 0.1}}]
    p = tmp_path / "serve.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    data = table.load([p])
    by_rate = {r["rate"]: r for r in data["rows"]}
    assert by_rate[1]["ttft_p50_s"] == 0.20 and by_rate[1]["ttft_p90_s"] == 0.9
    assert by_rate[1]["rounds"] == 3 and by_rate[1]["ttft_p50_range_s"] == (0.10, 0.30)
    assert by_rate[1]["cpu_cores"] == 2.0
    assert by_rate[2]["ttft_p90_s"] == 1.2 and by_rate[2]["unfinished"] == 0
    assert "rounds" not in by_rate[4]
    assert table.max_rate(data["rows"], 1.0) == 1
    assert table.max_rate(data["rows"], 1.3) == 2
    md = table.markdown(data)
    assert "| tutti | 1 | 3 | 10/10 | 0.200 (0.100-0.300) | 0.900 |" in md


def test_table_gpu_hits_count_each_request_once():
    # vLLM's counter saw a delayed request's lookups twice (300 hits); the requests report
    # 900 tokens cached, 800 of them from the tier: vLLM's GPU prefix cache served 100.
    r = {"prompt_tokens": 1000, "gpu_hit_tokens": 300, "tier_hit_tokens": 800,
         "cached_tokens": 900}
    assert table.gpu_hit_tokens(r) == 100
    del r["cached_tokens"]  # rows from before the bench recorded it
    assert table.gpu_hit_tokens(r) == 300


@pytest.mark.skipif(os.environ.get("TUTTI_SKIP_SERVE_SMOKE") == "1", reason="asked to skip")
def test_tutti_variants_differ_only_in_how_they_load(tmp_path):
    """tutti: the connector's defaults; tutti-layerwise asks for layerwise loads, and
    tutti-no-async-sched for them in a vLLM without asynchronous scheduling; tutti-gpu-uring
    and tutti-uring name their engine; tutti-no-share reads a prefix another request is
    loading again."""
    summary = {"requests": 40, "documents": 12, "unique_kv_gib": 30.0, "prefix_max": 32838}
    kvpt = 131072
    base, env, info = systems.config("tutti", tmp_path, tmp_path, summary, kvpt)
    assert base["kv_connector"] == "TuttiConnector" and not env
    assert set(base["kv_connector_extra_config"]) == {"dirs", "capacity_gb"}
    assert systems.engine_overrides("tutti") == {}
    lw, _, info = systems.config("tutti-layerwise", tmp_path, tmp_path, summary, kvpt)
    assert lw["kv_connector_extra_config"] == dict(base["kv_connector_extra_config"],
                                                   layerwise=True)
    assert info["layerwise"] is True and systems.engine_overrides("tutti-layerwise") == {}
    ns, _, info = systems.config("tutti-no-async-sched", tmp_path, tmp_path, summary, kvpt)
    assert ns == lw
    assert systems.engine_overrides("tutti-no-async-sched") == {"async_scheduling": False}
    assert info["async_scheduling"] is False
    gu, _, info = systems.config("tutti-gpu-uring", tmp_path, tmp_path, summary, kvpt)
    assert gu["kv_connector_extra_config"] == dict(base["kv_connector_extra_config"],
                                                   engine="gpu-uring")
    assert info["engine"] == "gpu-uring" and systems.engine_overrides("tutti-gpu-uring") == {}
    ur, _, info = systems.config("tutti-uring", tmp_path, tmp_path, summary, kvpt)
    assert ur["kv_connector_extra_config"] == dict(base["kv_connector_extra_config"],
                                                   engine="uring")
    assert info["engine"] == "uring"
    no, _, info = systems.config("tutti-no-share", tmp_path, tmp_path, summary, kvpt)
    assert no["kv_connector_extra_config"] == dict(base["kv_connector_extra_config"],
                                                   share_loads=False)
    assert info["share_loads"] is False
    al, _, info = systems.config("tutti", tmp_path, tmp_path, summary, kvpt,
                                 tutti_load_policy="always")
    assert al["kv_connector_extra_config"] == dict(base["kv_connector_extra_config"],
                                                   load_policy="always")
    assert info["load_policy"] == "always"
    assert systems.TUTTI_SYSTEMS <= systems.USES_STORAGE


def test_serve_bench_cpu_smoke(tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(SERVE.parents[1] / "python"))
    # Every hit loads: the tiny model on a CPU computes about as fast as the store reads, so
    # the load plan would recompute some hits, or part of them, by timing; this checks what the
    # harness counts and compares, which needs the tier's hits.
    subprocess.run([sys.executable, str(SERVE / "serve_bench.py"), "--smoke", "--out",
                    str(out), "--storage", "emulated", "--systems",
                    "tutti,tutti-no-async-sched,recompute,lmcache,lmcache-mp",
                    "--emulated-dir", str(tmp_path / "emulated"), "--deadline", "900",
                    "--tutti-load-policy", "always", "--repeats", "2"],
                   check=True, timeout=1000, env=env)
    rows = [json.loads(x) for x in (out / "serve.jsonl").read_text().splitlines()]
    rates = {(r["system"], r["rate"]): r for r in rows if r.get("phase") == "rate"
             and not r.get("skipped")}
    assert {s for s, _ in rates} == {"tutti", "tutti-no-async-sched", "recompute"}, rows
    # Two rounds of the sweep in each system's vLLM, every rate measured in each.
    rounds = {(r["system"], r["rate"], r["round"]) for r in rows if r.get("phase") == "rate"
              and not r.get("skipped")}
    assert rounds == {(s, rate, n) for s, rate in rates for n in (0, 1)}, rows
    for (system, _), r in rates.items():
        assert r["completed"] == r["requests"] and r["ttft_p50_s"] > 0, r
        assert r["itl_mean_s"] > 0 and r["throughput_rps"] > 0 and r["cpu_s"] > 0, r
        if system.startswith("tutti"):
            # Every document was stored in the warm-up: the tier serves what vLLM's capped
            # cache does not, and the loads are counted.
            assert r["tier_hit_tokens"] > 0 and r["tutti_load_tokens"] > 0, r
            assert r["tutti_load_errors"] == 0, r
        else:
            assert not r["tier_hit_tokens"], r
    warm = [r for r in rows if r.get("phase") == "warmup"]
    assert {r["system"] for r in warm} == {"tutti", "tutti-no-async-sched", "recompute"}
    skipped = [r for r in rows if r.get("phase") == "skipped"]
    assert {r["system"] for r in skipped} == {"lmcache", "lmcache-mp"}
    # The probes: prefixes from Tutti's tier (from vLLM's prefix cache for vLLM alone), outputs
    # identical.
    probes = {r["system"]: r for r in rows if r.get("phase") == "probe"}
    assert set(probes) == {"tutti", "tutti-no-async-sched", "recompute"}
    for r in probes.values():
        assert [p["cached"] for p in r["probes"]] == [256, 256], r
        assert all(len(p["tokens"]) == 4 for p in r["probes"]), r
    assert probes["tutti"]["probes"] == probes["recompute"]["probes"]
    assert probes["tutti-no-async-sched"]["probes"] == probes["recompute"]["probes"]
    # One suffix after other prefixes: other outputs (the check sees the KV).
    assert probes["recompute"]["probes"][0]["tokens"] != probes["recompute"]["probes"][1]["tokens"]
    md = (out / "serve-summary.md").read_text()
    assert "| tutti |" in md and "| recompute |" in md
    assert "| rounds |" in md
    assert "same (2 of 2)" in md and "reference" in md


def test_tier_bandwidth_reads_tutti_counters_and_lmcache_prefetches():
    kvpt = 131072  # llama-3-8b in bf16
    rows = [json.dumps(r) for r in (
        {"system": "tutti", "storage": "emulated", "model": "llama-3-8b", "rate": 1,
         "tutti_load_tokens": 10000, "tutti_load_s": 0.5},
        {"system": "tutti", "storage": "emulated", "model": "llama-3-8b", "phase": "warmup"},
        {"system": "offload-cpu", "storage": "none", "model": "llama-3-8b", "rate": 1})]
    (row,) = tier_bandwidth.tutti_rows(rows)
    assert row[:3] == ("tutti", "emulated", 1)
    assert row[3] == pytest.approx(10000 * kvpt / 1e9) and row[5] == pytest.approx(row[3] / 0.5)
    assert tier_bandwidth.local_model.kv_bytes_per_token("llama-3-8b") == kvpt
    log = "\n".join([
        "x Prefetch request completed (L1+L2): 4/4 retained keys (0 L1, 4 L2) in 20.0 ms (a)",
        "x Prefetch request completed (L1+L2): 2/2 retained keys (2 L1, 0 L2) in 0.5 ms (b)",
        "x Prefetch request completed (L1+L2): 3/3 retained keys (1 L1, 2 L2) in 9.0 ms (c)",
        "x Prefetch request completed (L1+L2): 2/2 retained keys (0 L1, 2 L2) in 40.0 ms (d)"])
    rates, gb, secs = tier_bandwidth.lmcache_prefetches(log, kvpt)
    chunk_gb = 256 * kvpt / 1e9  # LMCache's chunk
    assert rates == pytest.approx([4 * chunk_gb / 0.02, 2 * chunk_gb / 0.04])
    assert gb == pytest.approx(6 * chunk_gb) and secs == pytest.approx(0.06)
