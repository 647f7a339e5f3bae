#!/usr/bin/python3
"""Encoder throughput beside llama.cpp's server on the same file (a benchmark, not a test):
embeddings/s on a bge-small-shaped bert (12 layers, dim 384, ff 1536, 12 heads, F16, mean
pooling) and rerank pairs/s on the same shape with a classification head (pooling rank), each at
1, 16 and 64 inputs of about 100 tokens per request, pagoda and llama-server taking turns
request by request (alternating, so that both see the same machine load), --rounds rounds each;
each figure is the median round. Prints the load average before and after (other processes on
the host move the figures; run it at normal priority).

usage: scripts/bench-encoders.py LLAMA_BIN_DIR [--pagoda build/pagoda] [--threads 2] [--rounds 5]
                                 [--batch-tokens 2048] [--slots 1]
LLAMA_BIN_DIR holds llama-server (a build of llama.cpp made outside this repository; its shared
libraries are found through LD_LIBRARY_PATH = that folder). --batch-tokens is each server's
step size in tokens (pagoda --max-batch-tokens; llama-server -b and -ub, since an encoder's
input must sit whole in one ubatch), both servers' default 2048 (about 20 inputs a pass for
pagoda). llama-server gets --slots parallel sequences over a unified KV cache (-np, -kvu, -c 512
each); with more than one it runs several inputs per pass, but its attention then spans the
whole ubatch under a mask (measured here: 16 slots, 1 thread, 0.8 embeddings/s at batch 16
against 2.8 at batch 1), so the default is its faster 1 slot, one input per pass. Prints one
line per figure.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module

fidelity = import_module("encoder-fidelity")  # Server, post: the same process handling

SHAPE = ["--arch", "bert", "--layers", "12", "--dim", "384", "--ff", "1536", "--heads", "12", "--ctx", "512",
         "--type", "f16", "--seed", "5"]
WORDS = ["the", "hello", "world", "cat", "dog", "sat", "on", "mat", "paris", "capital", "france", "is", "of",
         "what"]


def texts(n, seed):
    """n texts of 98 words from the generated vocabulary (about 100 tokens with [CLS]/[SEP])."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(98)) for _ in range(n)]


def run(port, kind, batch, seed):
    """One request; returns the seconds it took."""
    t0 = time.perf_counter()
    if kind == "embed":
        fidelity.post(port, "/v1/embeddings", {"input": texts(batch, seed)})
    else:  # about 100 tokens per pair: a short query and a 90-word document
        docs = [" ".join(t.split()[:90]) for t in texts(batch, seed)]
        fidelity.post(port, "/v1/rerank", {"query": "what is the capital of france", "documents": docs})
    return time.perf_counter() - t0


def bench(args, kind, model):
    llama_flags = ["--embeddings", "--pooling", "mean"] if kind == "embed" else ["--rerank"]
    bt = str(args.batch_tokens)
    with fidelity.Server([args.pagoda, "serve", model, "--threads", str(args.threads), "--max-batch-tokens", bt],
                         "pagoda serve") as p, \
         fidelity.Server([os.path.join(args.llama_bin, "llama-server"), "-m", model, "--host", "127.0.0.1",
                          "-t", str(args.threads), "-c", str(512 * args.slots), "-b", bt, "-ub", bt,
                          "-np", str(args.slots), "-kvu",
                          *llama_flags], "llama-server") as l:
        for batch in (1, 16, 64):
            run(p.port, kind, batch, 0), run(l.port, kind, batch, 0)  # warm-up
            took = {"pagoda": [], "llama.cpp": []}
            for r in range(args.rounds):
                took["pagoda"].append(run(p.port, kind, batch, r + 1))
                took["llama.cpp"].append(run(l.port, kind, batch, r + 1))
            unit = "embeddings/s" if kind == "embed" else "pairs/s"
            figures = "  ".join(f"{who} {batch / statistics.median(s):8.1f}" for who, s in took.items())
            print(f"{kind:6s} batch {batch:3d}: {figures} {unit} (median of {args.rounds})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bin")
    ap.add_argument("--pagoda", default="build/pagoda")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--slots", type=int, default=1)
    args = ap.parse_args()
    print("load average before: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    workdir = tempfile.mkdtemp(prefix="bench-encoders-")
    for kind, pooling in (("embed", "mean"), ("rerank", "rank")):
        model = os.path.join(workdir, f"bge-small-{pooling}.gguf")
        subprocess.run([args.pagoda, "make-model", *SHAPE, "--pooling", pooling, "--output", model, "--quiet"],
                       check=True)
        bench(args, kind, model)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
