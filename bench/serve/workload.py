# SPDX-License-Identifier: Apache-2.0
"""Long-document QA traces shaped like LEval and LooGLE, as token ids with arrival times.

One request is a document's shared prefix (a template plus the document) and a private suffix
(a question plus a tail), so every question on a document shares that document's prefix
exactly. Documents come from LEval's measured lengths (leval-docs.csv: every unique document's
length and its questions' and answers' lengths) or from a parametric model of LooGLE
(lognormal document lengths per domain, Poisson questions per document). A trace takes whole
documents at random within a length band (a pool of D of them, more if their questions number
fewer than N), shuffles all their (document, question) pairs and keeps the first N; arrivals
are Poisson (gamma gaps of shape 1, or another burstiness) at a given rate. The content and
the order do not depend on the rate: the arrival times at rate r are the unit-rate times
divided by r, so a sweep replays one trace faster and faster.

Token ids are drawn from seeded generators per document and per request, clear of the
tokenizer's special ids, so that a document hashes to the same blocks in every request.
``--scale`` shrinks every length (for a tiny model on a CPU) keeping the trace's shape.

Usage: workload.py --dataset leval|loogle [--preset P] [--docs-min T] [--docs-max T] [--docs D]
                [--requests N] [--output reference|fixed:N] [--seed S] [--scale F] [--rate R]
prints a summary (and, with --jsonl FILE, one request per line with its arrival at --rate).
"""

import argparse
import csv
import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEVAL_CSV = HERE / "leval-docs.csv"

LEVAL_PRESETS = {
    "all": None,
    "qa": {"financial_qa", "legal_contract_qa", "multidoc_qa", "narrative_qa",
           "natural_question", "scientific_qa"},
    "closed": {"coursera", "gsm100", "quality", "topic_retrieval_longchat", "tpo", "sci_fi",
               "codeU"},
}
# Tokens around the document and the question: the chat wrapper, LEval's system prompt and
# "Document is as follows." before the document; the instruction's framing after it.
LEVAL_PREFIX_OVERHEAD = {"gsm100": 50, "topic_retrieval_longchat": 105, "coursera": 75}
LEVAL_PREFIX_DEFAULT = 70
LEVAL_SUFFIX_OVERHEAD = 25

# LooGLE: documents per domain with a lognormal length (mean, sigma), and per task the domain,
# the mean number of questions per document, the question length (median, sigma) and the
# answer length (median, sigma, cap).
LOOGLE_DOMAINS = {"wiki": (105, 23300, 0.30), "scripts": (155, 47400, 0.30),
                  "arxiv": (516, 23500, 0.35)}
LOOGLE_TASKS = {
    "shortdep_qa": ("wiki", 18.6, 12, 0.30, 13, 0.90, 300),
    "longdep_qa_w": ("wiki", 4.4, 19, 0.50, 19, 0.90, 500),
    "shortdep_cloze": ("scripts", 18.6, 137, 0.40, 18, 0.35, 50),
    "longdep_qa_s": ("scripts", 4.1, 19, 0.50, 19, 0.90, 500),
    "summarization": ("arxiv", 1.0, 10, 0.00, 195, 0.30, 500),
}
LOOGLE_PRESETS = {"longdep_qa": ["longdep_qa_w", "longdep_qa_s"],
                  "wiki_qa": ["shortdep_qa", "longdep_qa_w"],
                  "qa": ["shortdep_qa", "longdep_qa_w", "longdep_qa_s"],
                  "all": list(LOOGLE_TASKS)}
LOOGLE_PREFIX_OVERHEAD, LOOGLE_SUFFIX_OVERHEAD = 30, 12


def lognormal(rng, mean=None, median=None, sigma=0.5):
    mu = math.log(median) if median else math.log(mean) - sigma * sigma / 2
    return math.exp(rng.gauss(mu, sigma))


def poisson(rng, lam):
    if lam > 30:  # the normal approximation
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def leval_docs(preset, path=LEVAL_CSV):
    keep = LEVAL_PRESETS[preset]
    docs = []
    with open(path) as f:
        for r in csv.DictReader(line for line in f if not line.startswith("#")):
            if keep and r["task"] not in keep:
                continue
            qs = [int(x) for x in r["question_tokens"].split()]
            ans = [int(x) for x in r["answer_tokens"].split()]
            docs.append({"doc_id": f"leval/{r['task']}/{r['doc_id']}",
                         "doc_tokens": int(r["doc_tokens"]),
                         "prefix_overhead": LEVAL_PREFIX_OVERHEAD.get(r["task"],
                                                                      LEVAL_PREFIX_DEFAULT),
                         "questions": [(q, LEVAL_SUFFIX_OVERHEAD, a)
                                       for q, a in zip(qs, ans, strict=True)]})
    return docs


def loogle_docs(preset, rng):
    tasks = LOOGLE_PRESETS[preset]
    docs = []
    for dom, (n, mean, sigma) in LOOGLE_DOMAINS.items():
        dtasks = [t for t in tasks if LOOGLE_TASKS[t][0] == dom]
        if not dtasks:
            continue
        for i in range(n):
            length = int(min(max(lognormal(rng, mean=mean, sigma=sigma), 4000), 127000))
            qs = []
            for t in dtasks:
                _, lam, qm, qsig, am, asig, cap = LOOGLE_TASKS[t]
                for _ in range(1 if t == "summarization" else poisson(rng, lam)):
                    q = max(4, round(lognormal(rng, median=qm, sigma=qsig))) if qsig else qm
                    a = min(cap, max(1, round(lognormal(rng, median=am, sigma=asig))))
                    qs.append((q, LOOGLE_SUFFIX_OVERHEAD, a))
            if qs:
                rng.shuffle(qs)
                docs.append({"doc_id": f"loogle/{dom}/{i:03d}", "doc_tokens": length,
                             "prefix_overhead": LOOGLE_PREFIX_OVERHEAD, "questions": qs})
    return docs


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def token_ids(key, n, lo, hi):
    """n token ids in [lo, hi), a function of key alone."""
    rng = random.Random(splitmix64(key))
    return [rng.randrange(lo, hi) for _ in range(n)]


def stable_key(text, seed):
    h = seed
    for ch in text.encode():
        h = splitmix64(h ^ ch)
    return h


class Trace:
    """The documents and requests of one trace; ``arrivals(rate)`` times them."""

    def __init__(self, dataset="leval", preset=None, docs_min=8192, docs_max=32768, docs=12,
                 requests=24, output="fixed:32", seed=0, scale=1.0, burstiness=1.0,
                 vocab=(1000, 100000)):
        preset = preset or ("qa" if dataset == "leval" else "longdep_qa")
        rng_cat, rng_sel, rng_ord, rng_arr = (random.Random(f"{seed}/{s}")
                                              for s in ("cat", "sel", "ord", "arr"))
        pool = leval_docs(preset) if dataset == "leval" else loogle_docs(preset, rng_cat)
        pool = [d for d in pool if docs_min <= d["doc_tokens"] <= docs_max]
        if not pool:
            raise ValueError(f"no {dataset}/{preset} document has {docs_min}-{docs_max} tokens")
        rng_sel.shuffle(pool)
        # Whole documents, at least `docs` of them and as many more as `requests` needs.
        chosen, nq = [], 0
        for d in pool:
            if len(chosen) >= docs and nq >= requests:
                break
            chosen.append(d)
            nq += len(d["questions"])
        pairs = [(d, q) for d in chosen for q in d["questions"]]
        rng_ord.shuffle(pairs)
        pairs = pairs[:requests]
        self.config = {"dataset": dataset, "preset": preset, "docs_min": docs_min,
                       "docs_max": docs_max, "docs": docs, "requests": requests,
                       "output": output, "seed": seed, "scale": scale,
                       "burstiness": burstiness}
        lo, hi = vocab
        self.docs = {}  # doc_id -> prefix token ids
        self.requests = []
        for i, (d, (q, tail, a)) in enumerate(pairs):
            if d["doc_id"] not in self.docs:
                n = max(1, round((d["prefix_overhead"] + d["doc_tokens"]) * scale))
                self.docs[d["doc_id"]] = token_ids(stable_key(d["doc_id"], seed), n, lo, hi)
            suffix = max(4, round((q + tail) * scale))
            out = a if output == "reference" else int(output.split(":")[1])
            self.requests.append({
                "id": i, "doc_id": d["doc_id"],
                "suffix": token_ids(stable_key(f"q{i}", seed + 1), suffix, lo, hi),
                "output_tokens": out})
        # Unit-rate arrival times: gamma gaps (shape b, mean 1).
        t, self.unit_times = 0.0, []
        for _ in self.requests:
            self.unit_times.append(t)
            t += rng_arr.gammavariate(burstiness, 1.0 / burstiness)

    def prompt(self, r):
        return self.docs[r["doc_id"]] + r["suffix"]

    def arrivals(self, rate):
        return [u / rate for u in self.unit_times]

    def warmup_requests(self):
        """One request per document of the trace, in the order of first use."""
        seen, out = set(), []
        for r in self.requests:
            if r["doc_id"] not in seen:
                seen.add(r["doc_id"])
                out.append(r)
        return out

    def summary(self, kv_bytes_per_token=131072):
        prompt = [len(self.docs[r["doc_id"]]) + len(r["suffix"]) for r in self.requests]
        doc_tokens = sum(len(v) for v in self.docs.values())
        return {"requests": len(self.requests), "documents": len(self.docs),
                "prompt_mean": round(sum(prompt) / len(prompt)), "prompt_max": max(prompt),
                "prefix_max": max(len(v) for v in self.docs.values()),
                "output_mean": round(sum(r["output_tokens"] for r in self.requests)
                                     / len(self.requests), 1),
                "unique_prefix_tokens": doc_tokens,
                "unique_kv_gib": round(doc_tokens * kv_bytes_per_token / 2**30, 2),
                "unit_duration": round(self.unit_times[-1], 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", choices=["leval", "loogle"], default="leval")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--docs-min", type=int, default=8192)
    ap.add_argument("--docs-max", type=int, default=32768)
    ap.add_argument("--docs", type=int, default=12)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--output", default="fixed:32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--jsonl", default=None)
    a = ap.parse_args()
    t = Trace(a.dataset, a.preset, a.docs_min, a.docs_max, a.docs, a.requests, a.output, a.seed,
              a.scale)
    print(json.dumps({"config": t.config, "summary": t.summary()}))
    if a.jsonl:
        with open(a.jsonl, "w") as f:
            for r, at in zip(t.requests, t.arrivals(a.rate), strict=True):
                f.write(json.dumps({"id": r["id"], "doc_id": r["doc_id"],
                                    "prompt_tokens": len(t.prompt(r)),
                                    "output_tokens": r["output_tokens"],
                                    "arrival_s": round(at, 6)}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
