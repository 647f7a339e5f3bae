#!/usr/bin/python3
"""KV cache element types against the f16 cache on real weights: for each of the 8 prompts of
../shared/testdata/models/stories260K.expected.json, `pagoda generate` greedy (64 tokens, one
thread, CPU) with an f16 cache and with each KV type spec asked for; prints per prompt the
number of equal ids (position by position), the first divergence, and the largest and mean
|chosen-token logprob difference| over the common prefix. With --llama BIN_DIR, also tries
llama.cpp's llama-cli with -fa -ctk T -ctv T on the same prompts and says what it did (a
llama.cpp build made outside this repository; c392e50 refuses q8_0 for heads of 8).

A type spec (--types takes a comma-separated list) is either one name, f16, f32 or q8_0, for K
and V (--kv-cache-type), or K and V apart as k=T:v=T (--kv-cache-type-k / --kv-cache-type-v; a
half left out is f16): --types q8_0,k=f16:v=q8_0 compares 8-bit K and V, then 8-bit V alone.

usage: scripts/kv-fidelity.py [--pagoda build/pagoda] [--types q8_0,k=f16:v=q8_0] [--llama BIN_DIR]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "..", "shared", "testdata", "models")


KV_TYPES = ("f16", "f32", "q8_0")


def kv_halves(spec):
    """(K type, V type) of a type spec: "q8_0" or "k=f16:v=q8_0" (a half left out is f16)."""
    if "=" not in spec:
        halves = (spec, spec)
    else:
        parts = dict(p.split("=", 1) for p in spec.split(":") if "=" in p)
        if set(parts) - {"k", "v"} or len(parts) != len(spec.split(":")):
            raise SystemExit("kv-fidelity: bad type spec %r (want T or k=T:v=T)" % spec)
        halves = (parts.get("k", "f16"), parts.get("v", "f16"))
    for t in halves:
        if t not in KV_TYPES:
            raise SystemExit("kv-fidelity: unknown KV type %r in %r (want one of %s)" % (t, spec, ", ".join(KV_TYPES)))
    return halves


def generate(pagoda, model, prompt, kv):
    k, v = kv_halves(kv)
    r = subprocess.run([pagoda, "generate", "--model", model, "--prompt", prompt, "-n", "64", "--ignore-eos",
                        "--threads", "1", "--device", "cpu", "--kv-cache-type-k", k, "--kv-cache-type-v", v,
                        "--print-tokens"],
                       capture_output=True, text=True, timeout=120, check=True)
    ids, lps = [], []
    for line in r.stderr.splitlines():
        if line.startswith("token "):
            _, tok, lp = line.split()[:3]
            ids.append(int(tok))
            lps.append(float(lp))
    return ids, lps


def llama_text(bin_dir, model, prompt, kv):
    k, v = kv_halves(kv)
    r = subprocess.run([os.path.join(bin_dir, "llama-cli"), "-m", model, "-p", prompt, "-n", "64", "--temp", "0",
                        "--ignore-eos", "-no-cnv", "-t", "1", "-fa", "-ctk", k, "-ctv", v, "--no-warmup"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        why = [l[l.find("GGML_ASSERT"):] for l in r.stderr.splitlines() if "GGML_ASSERT" in l]
        return None, (why[0] if why else "exit status %d" % r.returncode)
    return r.stdout, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", default=os.path.join(ROOT, "build", "pagoda"))
    ap.add_argument("--types", default="q8_0", help="comma-separated type specs: T or k=T:v=T")
    ap.add_argument("--llama")
    a = ap.parse_args()
    model = os.path.join(MODELS, "stories260K.gguf")
    cases = json.load(open(os.path.join(MODELS, "stories260K.expected.json")))["cases"]
    failing = 0
    specs = a.types.split(",")
    for kv in specs:
        kv_halves(kv)  # a bad spec stops before anything runs
    for kv in specs:
        passed = 0
        for c in cases:
            base, lb = generate(a.pagoda, model, c["prompt"], "f16")
            ids, lk = generate(a.pagoda, model, c["prompt"], kv)
            same = sum(x == y for x, y in zip(base, ids))
            prefix = 0
            while prefix < min(len(base), len(ids)) and base[prefix] == ids[prefix]:
                prefix += 1
            d = [abs(x - y) for x, y in zip(lb[:prefix], lk[:prefix])] or [0.0]
            print("%-12s %-34r equal %2d/64, first difference at %2d, |dlogprob| max %.4f mean %.5f"
                  % (kv, c["prompt"][:32], same, prefix, max(d), sum(d) / len(d)))
            passed += same >= 56
            if a.llama:
                out = {}
                for t in ("f16", kv):
                    out[t] = llama_text(a.llama, model, c["prompt"], t)
                if out[kv][1]:
                    print("             llama.cpp -ctk/-ctv %s: refused (%s)" % (kv, out[kv][1]))
                else:
                    print("             llama.cpp -ctk/-ctv %s: text %s its f16 run's" %
                          (kv, "equals" if out[kv][0] == out["f16"][0] else "differs from"))
        print("%s: %d of %d prompts keep >= 56 of 64 ids of the f16 run" % (kv, passed, len(cases)))
        failing += passed < len(cases)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
