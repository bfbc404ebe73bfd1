# SPDX-License-Identifier: Apache-2.0
"""Pack installed Python distributions into parts small enough to travel one per call, and
unpack them on the other side (see scripts/vllm-gpu-payload.sh, which downloads them).

Format. Each distribution, installed alone into stage/<name>, is cut into units (files in path
order, at most UNIT_RAW_BYTES each, a larger file alone); a unit is an uncompressed tar whose
names are relative to the site folder, compressed as one xz stream. Units are bin-packed into
parts: a part file (part-NN.txz) is the concatenation of whole xz streams, so without split
units `xz -dc part-NN.txz | tar -x -i` would unpack it by hand. A unit whose stream is larger
than a part is cut into pieces placed in several parts, and is unpacked once they are all
present. manifest.json says where each piece lies (part, offset, length) and holds the sha256
of every part and unit, the versions and what was pruned.

Install unpacks into PREFIX/site, one unit at a time, marking each unit done
(PREFIX/.payload/<unit sha256>): a rerun skips what is done and unpacks what newly arrived.
Distributions marked if-missing are skipped where the machine's own Python already has them.
"""
import argparse
import concurrent.futures
import fnmatch
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile

FORMAT = 1
UNIT_RAW_BYTES = 48 << 20
XZ_PRESET = 9

# What the payload leaves out of the installed distributions, and why. Patterns are fnmatch
# patterns on paths relative to the site folder.
PRUNE = [
    ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
     "FlashAttention 2 kernels: vLLM uses FlashAttention 3 on Hopper"),
    ("vllm/vllm-rs", "the Rust frontend binary: the Python entry points do not use it"),
    ("vllm/third_party/deep_gemm/_C.cpython-31[!2]-x86_64-linux-gnu.so",
     "DeepGEMM builds for other Python versions"),
    ("vllm/third_party/deep_gemm/include/*",
     "DeepGEMM's CUDA headers for its JIT (FP8 GEMMs; not used by bf16 models)"),
    ("vllm/third_party/fmha_sm100/cutlass/*", "Blackwell-only attention sources"),
    ("vllm/third_party/fmha_sm100/csrc/*", "Blackwell-only attention sources"),
    ("vllm/entrypoints/serve/instrumentator/static/*", "the Swagger UI of the API docs"),
    ("bin/*", "console scripts (their shebang names this machine's Python)"),
    ("*/__pycache__/*", "byte code of this machine's Python"),
]

# Imported by the smoke check once every part is unpacked: what the store bench, the tests
# and the serving benchmark use.
SMOKE_MODULES = [
    "vllm",
    "vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector",
    "vllm.entrypoints.openai.api_server",
    "lmcache",
    "lmcache.v1.cache_engine",
    "lmcache.v1.storage_backend.local_disk_backend",
    "lmcache.v1.gpu_connector",
    "lmcache.integration.vllm.vllm_v1_adapter",
    "lmcache.integration.vllm.lmcache_mp_connector",
    "lmcache.v1.multiprocess.server",
]

ENV_VARS = {
    # flashinfer is not shipped; vLLM's sampler then uses its PyTorch implementation.
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    # No network there: models are local configs with dummy weights.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "LMCACHE_TRACK_USAGE": "false",
}


def die(msg):
    print(f"vllm-payload: {msg}", file=sys.stderr)
    sys.exit(1)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def mib(n):
    return f"{n / (1 << 20):.1f} MiB"


# ---- prepare side ----


def normalize(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def find_wheel(args):
    """Print the wheel in args.dir that pip downloaded for the pinned spec NAME==VERSION."""
    name, version = args.spec.split("==")
    want = f"{normalize(name)}-{version}-"
    hits = [w for w in os.listdir(args.dir)
            if w.endswith(".whl") and normalize(w.split("-")[0]) + "-" + w.split("-")[1] + "-" == want]
    if len(hits) != 1:
        die(f"expected one wheel for {args.spec} in {args.dir}, found {hits}")
    print(os.path.join(args.dir, hits[0]))


def pruned(rel):
    """The PRUNE rule that leaves rel out, or None."""
    for pattern, why in PRUNE:
        if fnmatch.fnmatch(rel, pattern):
            return pattern, why
    return None


def dist_files(root):
    """Files and symlinks under root, relative, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in filenames:
            out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


def make_units(name, root, pruned_log):
    units, cur, cur_bytes = [], [], 0
    for rel in dist_files(root):
        path = os.path.join(root, rel)
        size = os.lstat(path).st_size
        rule = pruned(rel)
        if rule is not None:
            # One entry per rule and distribution: a manifest listing every header would
            # travel with every call.
            e = pruned_log.setdefault((name, rule[0]), {
                "dist": name, "pattern": rule[0], "why": rule[1], "files": 0, "bytes": 0})
            e["files"] += 1
            e["bytes"] += size
            if e["files"] == 1:
                e["example"] = rel
            continue
        if size >= UNIT_RAW_BYTES:
            units.append([rel])
            continue
        if cur and cur_bytes + size > UNIT_RAW_BYTES:
            units.append(cur)
            cur, cur_bytes = [], 0
        cur.append(rel)
        cur_bytes += size
    if cur:
        units.append(cur)
    return units


def tar_bytes(root, files):
    """A reproducible tar of files (relative to root): fixed owner, mode kept, mtime 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            info = tar.gettarinfo(os.path.join(root, rel), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with open(os.path.join(root, rel), "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def compress_unit(root, files, cache_dir):
    """The unit's xz stream in cache_dir, reused when the same tar was compressed before."""
    raw = tar_bytes(root, files)
    key = hashlib.sha256(raw).hexdigest()
    path = os.path.join(cache_dir, key + ".xz")
    if not os.path.exists(path):
        data = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64,
                             preset=XZ_PRESET)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    return path, len(raw)


def pack_bins(items, capacity):
    """First-fit decreasing: items are (size, payload); returns lists of payloads."""
    bins = []
    for size, payload in sorted(items, key=lambda i: -i[0]):
        for b in bins:
            if b[0] + size <= capacity:
                b[0] += size
                b[1].append(payload)
                break
        else:
            bins.append([size, [payload]])
    return [b[1] for b in bins]


def plan_calls(parts, call_bytes):
    """Consecutive calls, each carrying at most two parts that fit together."""
    calls = []
    for p in parts:
        if (calls and len(calls[-1]) < 2 and
                sum(q["bytes"] for q in calls[-1]) + p["bytes"] <= call_bytes):
            calls[-1].append(p)
        else:
            calls.append([p])
    return [[p["file"] for p in c] for c in calls]


def pack(args):
    packages = []
    with open(args.packages) as f:
        for line in f:
            name, version, policy, wheel = line.rstrip("\n").split("\t")
            packages.append({"name": name, "version": version, "policy": policy,
                             "wheel": wheel,
                             "wheel_sha256": sha256_file(os.path.join(args.wheels, wheel))})
    os.makedirs(args.units, exist_ok=True)
    pruned_log, jobs = {}, []
    for p in packages:
        root = os.path.join(args.stage, p["name"])
        for k, files in enumerate(make_units(p["name"], root, pruned_log)):
            jobs.append((p, f"{p['name']}-{k + 1:02d}", root, files))

    # Two workers: the machine is shared.
    units = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        futs = [pool.submit(compress_unit, root, files, args.units) for _, _, root, files in jobs]
        for (p, uname, _, files), fut in zip(jobs, futs):
            path, raw = fut.result()
            units.append({"name": uname, "dist": p["name"], "policy": p["policy"],
                          "sha256": sha256_file(path), "xz_bytes": os.path.getsize(path),
                          "raw_bytes": raw, "files": len(files), "_path": path})
            print(f"  {uname:40s} {mib(raw):>10s} -> {mib(units[-1]['xz_bytes'])}")

    # Pieces: a unit, or, when larger than a part, its stream cut into part-sized slices.
    cap = args.part_bytes
    pieces = []
    for u in units:
        n = (u["xz_bytes"] + cap - 1) // cap
        u["pieces"] = n
        for i in range(n):
            off = i * cap
            pieces.append((min(cap, u["xz_bytes"] - off), (u, i, off)))
    bins = pack_bins(pieces, cap)
    # Larger parts first, numbered in that order.
    bins.sort(key=lambda b: -sum(min(cap, u["xz_bytes"] - off) for u, _, off in b))

    for old in os.listdir(args.out):
        if re.fullmatch(r"part-\d+\.txz", old) or old == "manifest.json":
            os.remove(os.path.join(args.out, old))
    parts = []
    for n, b in enumerate(bins, 1):
        fname = f"part-{n:02d}.txz"
        entries, off_in_part = [], 0
        with open(os.path.join(args.out, fname), "wb") as out:
            for u, i, off in sorted(b, key=lambda e: (e[0]["name"], e[1])):
                length = min(cap, u["xz_bytes"] - off)
                with open(u["_path"], "rb") as f:
                    f.seek(off)
                    out.write(f.read(length))
                entries.append({"unit": u["name"], "piece": i, "offset": off_in_part,
                                "length": length})
                off_in_part += length
        path = os.path.join(args.out, fname)
        parts.append({"file": fname, "bytes": os.path.getsize(path),
                      "sha256": sha256_file(path), "pieces": entries})
    for u in units:
        del u["_path"]

    payload_id = hashlib.sha256("".join(u["sha256"] for u in units).encode()).hexdigest()[:16]
    manifest = {
        "format": FORMAT,
        "payload_id": payload_id,
        "target": "CPython 3.12, manylinux x86_64 (glibc 2.39)",
        "packages": packages,
        "pruned": list(pruned_log.values()),
        "units": units,
        "parts": parts,
        "part_bytes": cap,
        "calls": plan_calls(parts, args.call_bytes),
        "env": ENV_VARS,
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    raw = sum(u["raw_bytes"] for u in units)
    cut = sum(p["bytes"] for p in pruned_log.values())
    print(f"== {len(packages)} distributions, {mib(raw)} unpacked "
          f"({mib(cut)} pruned), {len(parts)} parts, "
          f"{mib(sum(p['bytes'] for p in parts))} in all")
    print_plan(manifest, args.out)


def print_plan(manifest, out):
    print(f"== payload {manifest['payload_id']}: parts")
    for p in manifest["parts"]:
        units = sorted({e["unit"] for e in p["pieces"]})
        shown = ", ".join(units[:6]) + (f" and {len(units) - 6} more" if len(units) > 6 else "")
        print(f"  {p['file']}  {mib(p['bytes']):>9s}  sha256 {p['sha256'][:16]}  {shown}")
    print("== calls, back to back on one held machine (carry these paths; each call runs "
          "the same command)")
    for n, files in enumerate(manifest["calls"], 1):
        carry = [f"{out}/manifest.json"] + [f"{out}/{f}" for f in files]
        print(f"  call {n}: carry {json.dumps(carry)}")
    print("  command: bash scripts/vllm-gpu-payload.sh install   (then: . build/vllm-prefix/env.sh)")
    print("  the last call can go on with the work itself, e.g. "
          "'bash scripts/vllm-gpu-payload.sh install && OUT=$OUT bash scripts/gpu-run.sh ...'")


def plan(args):
    print_plan(load_manifest(args.out), args.out)


# ---- GPU machine side ----


def load_manifest(out):
    path = os.path.join(out, "manifest.json")
    if not os.path.exists(path):
        die(f"{path} is missing: carry it with every part (see 'vllm-gpu-payload.sh plan')")
    with open(path) as f:
        m = json.load(f)
    if m.get("format") != FORMAT:
        die(f"{path}: format {m.get('format')}, this script reads {FORMAT}")
    return m


def image_has(dists, python):
    """The distributions the machine's Python has without the payload, with their versions."""
    code = ("import importlib.metadata as m, json, sys\n"
            "out = {}\n"
            "for d in sys.argv[1:]:\n"
            "    try:\n"
            "        out[d] = m.version(d)\n"
            "    except m.PackageNotFoundError:\n"
            "        pass\n"
            "print(json.dumps(out))\n")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([python, "-c", code, *dists], capture_output=True, text=True,
                       check=False, env=env)
    if r.returncode != 0:
        die(f"cannot ask {python} which packages it has: {r.stderr.strip()}")
    return json.loads(r.stdout)


def extract(data, site):
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data)), mode="r:") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(site, filter="data")
        else:
            for m in tar.getmembers():
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    die(f"unsafe path in the payload: {m.name}")
            tar.extractall(site)


def write_env(prefix, site, env_vars):
    path = os.path.join(prefix, "env.sh")
    with open(path + ".tmp", "w") as f:
        f.write("# SPDX-License-Identifier: Apache-2.0\n"
                "# Written by scripts/vllm-gpu-payload.sh install: source it to use the "
                "payload's vLLM and LMCache.\n")
        f.write(f'export PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}"\n')
        f.writelines(f"export {k}={v}\n" for k, v in env_vars.items())
    os.replace(path + ".tmp", path)
    return path


def smoke(site, env_vars, python):
    """Import what the benches use; returns the number of failures."""
    code = r"""
import importlib, importlib.util, glob, os, sys, traceback
failures = 0
import torch
print(f"  torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
# LMCache falls back to slow torch ops, with a warning only, when its compiled ops do not
# load (a torch ABI mismatch): load each of its extensions by file first.
spec = importlib.util.find_spec("lmcache")
for so in sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "*.so"))):
    name = "lmcache." + os.path.basename(so).split(".")[0]
    try:
        s = importlib.util.spec_from_file_location(name, so)
        s.loader.exec_module(importlib.util.module_from_spec(s))
        print(f"  ok   {name} (compiled)")
    except Exception as e:
        failures += 1
        print(f"  FAIL {name} (compiled): {type(e).__name__}: {e}")
for mod in sys.argv[1:]:
    try:
        m = importlib.import_module(mod)
        v = getattr(m, "__version__", None)
        print(f"  ok   {mod}" + (f" {v}" if v and "." not in mod else ""))
    except Exception as e:
        failures += 1
        print(f"  FAIL {mod}: {type(e).__name__}: {e}")
        tb = traceback.format_exc().strip().splitlines()
        print("       " + "\n       ".join(tb[-4:]))
sys.exit(min(failures, 100))
"""
    env = dict(os.environ)
    env.update(env_vars)
    env["PYTHONPATH"] = site + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([python, "-c", code, *SMOKE_MODULES], check=False,
                          env=env).returncode


def install(args):
    m = load_manifest(args.out)
    prefix = os.path.abspath(args.prefix)
    site = os.path.join(prefix, "site")
    state = os.path.join(prefix, ".payload")
    python = os.environ.get("PYTHON", "python3")

    # A prefix holding another payload is emptied: its files would mix with this one's.
    id_path = os.path.join(state, "payload_id")
    if os.path.exists(id_path):
        with open(id_path) as f:
            old = f.read().strip()
        if old != m["payload_id"]:
            print(f"== {prefix} holds payload {old}, not {m['payload_id']}: emptying it")
            shutil.rmtree(site, ignore_errors=True)
            shutil.rmtree(state, ignore_errors=True)
    os.makedirs(site, exist_ok=True)
    os.makedirs(state, exist_ok=True)
    with open(id_path, "w") as f:
        f.write(m["payload_id"] + "\n")

    def done(u):
        return os.path.exists(os.path.join(state, u["sha256"]))

    units = {u["name"]: u for u in m["units"]}
    # Parts present and intact; a corrupt one is reported and left alone.
    present, missing, bad = {}, [], []
    for p in m["parts"]:
        path = os.path.join(args.out, p["file"])
        if all(done(units[e["unit"]]) for e in p["pieces"]):
            print(f"  {p['file']}: already unpacked, skipped")
            continue
        if not os.path.exists(path):
            missing.append(p["file"])
        elif os.path.getsize(path) != p["bytes"] or sha256_file(path) != p["sha256"]:
            bad.append(p["file"])
            print(f"  {p['file']}: CHECKSUM MISMATCH (size {os.path.getsize(path)}, "
                  f"expected {p['bytes']}): not unpacked; carry it again")
        else:
            present[p["file"]] = path

    where = {}
    for p in m["parts"]:
        for e in p["pieces"]:
            where.setdefault(e["unit"], []).append((e["piece"], p["file"], e["offset"], e["length"]))

    optional = [u["dist"] for u in m["units"] if u["policy"] == "if-missing"]
    have = image_has(sorted(set(optional)), python) if optional else {}
    reported, skipped, unpacked = set(), 0, 0
    for u in m["units"]:
        if done(u):
            continue
        if u["policy"] == "if-missing" and u["dist"] in have:
            if u["dist"] not in reported:
                print(f"  {u['dist']}: the machine has {have[u['dist']]}, not unpacked")
                reported.add(u["dist"])
            open(os.path.join(state, u["sha256"]), "w").close()
            skipped += 1
            continue
        locs = sorted(where[u["name"]])
        if any(f not in present for _, f, _, _ in locs):
            continue
        data = bytearray()
        for _, f, off, length in locs:
            with open(present[f], "rb") as fh:
                fh.seek(off)
                data += fh.read(length)
        if hashlib.sha256(data).hexdigest() != u["sha256"]:
            die(f"unit {u['name']}: checksum mismatch after joining its pieces")
        extract(bytes(data), site)
        open(os.path.join(state, u["sha256"]), "w").close()
        unpacked += 1
    env_path = write_env(prefix, site, m["env"])
    left = [u["name"] for u in m["units"] if not done(u)]
    print(f"== unpacked {unpacked} units, skipped {skipped} (the machine has them); "
          f"{len(m['units']) - len(left)} of {len(m['units'])} units in {site}")
    print(f"== environment: . {env_path}")
    if missing or bad or left:
        need = sorted(set(missing + bad))
        print(f"== INCOMPLETE: parts still needed: {' '.join(need) or '(none)'}; "
              f"units waiting: {len(left)}")
        return 3
    versions = {p["name"]: p["version"] for p in m["packages"]}
    print(f"== complete: vllm {versions.get('vllm')}, lmcache {versions.get('lmcache')}")
    if not args.smoke:
        return 0
    print(f"== smoke check with {python}:")
    failures = smoke(site, m["env"], python)
    if failures:
        print(f"== SMOKE CHECK FAILED: {failures} import(s) failed (see above)")
        return 4
    print("== smoke check passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("find-wheel")
    a.add_argument("dir")
    a.add_argument("spec")
    a = sub.add_parser("pack")
    for opt in ("--stage", "--packages", "--wheels", "--units", "--out"):
        a.add_argument(opt, required=True)
    a.add_argument("--part-bytes", type=int, required=True)
    a.add_argument("--call-bytes", type=int, required=True)
    a = sub.add_parser("plan")
    a.add_argument("--out", required=True)
    a = sub.add_parser("install")
    a.add_argument("--out", required=True)
    a.add_argument("--prefix", required=True)
    a.add_argument("--no-smoke", dest="smoke", action="store_false",
                   help="unpack only (the import check needs the GPU machine's Python)")
    args = ap.parse_args()
    if args.cmd == "find-wheel":
        find_wheel(args)
    elif args.cmd == "pack":
        if args.part_bytes <= 0 or args.call_bytes < args.part_bytes:
            die("--part-bytes must be positive and at most --call-bytes")
        pack(args)
    elif args.cmd == "plan":
        plan(args)
    else:
        sys.exit(install(args))


if __name__ == "__main__":
    main()
