#!/usr/bin/env python3
"""Greedy fidelity of `pagoda generate` on stories260K against the ids llama.cpp computed.

usage: stories-check.py PAGODA_BINARY TESTDATA_MODELS_DIR [--device cpu|cuda] [--kv T ...]

For each KV type (a --kv-cache-type name, or K/V as in "f16/q8_0"), runs the 8 prompts of
stories260K.expected.json greedily for 64 tokens and prints, per prompt, how many leading ids
equal the expected ones and the largest logprob difference over that matching run. The CPU
backend's bar is tests/e2e/test_stories_fidelity.cpp; this script exists to hold another
backend (CUDA) to the same data on a machine where CTest does not run. Standard library only.
Exit status: 0 when every prompt of every KV type matches all 64 ids, else 1.
"""
import argparse
import json
import os
import subprocess
import sys


def generate(binary, model, prompt, device, kv):
    k, _, v = kv.partition("/")
    kv_flags = ["--kv-cache-type", kv] if not v else ["--kv-cache-type-k", k, "--kv-cache-type-v", v]
    cmd = [binary, "generate", "--model", model, "--prompt", prompt, "-n", "64", "--ignore-eos",
           "--threads", "1", "--device", device, "--print-tokens"] + kv_flags
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}: {run.stderr[-2000:]}")
    ids, logprobs = [], []
    for line in run.stderr.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "token":
            ids.append(int(parts[1]))
            logprobs.append(float(parts[2]))
    return ids, logprobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("models_dir")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kv", nargs="+", default=["f32", "f16", "q8_0", "f16/q8_0"])
    a = ap.parse_args()
    model = os.path.join(a.models_dir, "stories260K.gguf")
    with open(os.path.join(a.models_dir, "stories260K.expected.json")) as f:
        cases = json.load(f)["cases"]
    ok = True
    for kv in a.kv:
        rows, worst_all = [], 0.0
        for c in cases:
            want = c["greedy_ids"]
            want_lp = c["greedy_logprobs"]
            try:
                ids, lps = generate(a.binary, model, c["prompt"], a.device, kv)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{a.device} kv {kv}: {c['prompt']!r}: {e}")
                ok = False
                rows.append(0)
                continue
            same = 0
            while same < min(len(ids), len(want)) and ids[same] == want[same]:
                same += 1
            worst = max((abs(x - y) for x, y in zip(lps[:same], want_lp[:same])), default=float("nan"))
            rows.append(same)
            worst_all = max(worst_all, worst) if same else worst_all
            ok = ok and same == len(want)
            print(f"{a.device} kv {kv}: {same:2d}/{len(want)} ids, max |dlogprob| {worst:.2e}  {c['prompt']!r}")
        print(f"{a.device} kv {kv}: {sum(r == 64 for r in rows)}/{len(rows)} prompts with all 64 ids "
              f"(fewest matching {min(rows)}; max |dlogprob| over matching ids {worst_all:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
