#!/usr/bin/python3
"""pagoda's encoders side by side with llama.cpp on identical random-weight GGUF files written by
`pagoda make-model` (bert, nomic-bert, xlm-roberta; mean and CLS pooling; rank for rerankers):
  - embeddings: pagoda serve's /v1/embeddings against llama.cpp's llama-embedding (normalized),
    the cosine of every input (pass: >= 0.9999);
  - Unigram token ids of the xlm-roberta vocabulary: `pagoda tokenize` against llama-tokenize on
    generated strings (pass: identical);
  - rerank: pagoda's /v1/rerank against llama-server's /v1/rerank (pass: |difference| <= 1e-3).
A bert reranker is scored too but reported apart: pagoda gives the second text token type 1
(as BERT cross-encoders were trained), llama.cpp type 0 everywhere, so their scores differ.

usage: scripts/encoder-fidelity.py LLAMA_BIN_DIR [--pagoda build/pagoda] [--keep DIR]
LLAMA_BIN_DIR holds llama-embedding, llama-tokenize and llama-server (a build of llama.cpp made
outside this repository; its shared libraries are found through LD_LIBRARY_PATH = that folder).
Exit status 1 when any check fails.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile

from loopback import free_port, post, wait_ready

TEXTS = [
    "hello world",
    "The cat sat on the mat.",
    "what is the capital of france? paris is the capital of france",
    "a",
    "Numbers 12345 and symbols #$%&*!",
    "  leading and trailing spaces  ",
    "caf\u00e9 \u00fcber ni\u00f1o \u4e2d\u6587 \u8a9e",
    "the quick brown fox jumps over the lazy dog " * 3,
]
QUERY = "what is the capital of france"
DOCS = ["paris is the capital of france", "the cat sat on the mat", "hello world", "dogs and cats"]

MODELS = {  # name: make-model flags
    "bert-mean": ["--arch", "bert", "--pooling", "mean"],
    "bert-cls": ["--arch", "bert", "--pooling", "cls"],
    "nomic-bert-mean": ["--arch", "nomic-bert", "--pooling", "mean"],
    "nomic-bert-cls": ["--arch", "nomic-bert", "--pooling", "cls"],
    "xlm-roberta-mean": ["--arch", "xlm-roberta", "--pooling", "mean"],
    "xlm-roberta-cls": ["--arch", "xlm-roberta", "--pooling", "cls"],
}
RERANKERS = {"xlm-roberta-rank": ["--arch", "xlm-roberta", "--pooling", "rank"],
             "bert-rank": ["--arch", "bert", "--pooling", "rank"]}
SHAPE = ["--layers", "2", "--dim", "64", "--ff", "128", "--heads", "4", "--ctx", "256", "--type", "f32"]


class Server:
    def __init__(self, argv, what):
        self.port = free_port()
        self.proc = subprocess.Popen(argv + ["--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.what = what

    def __enter__(self):
        wait_ready(self.port, self.proc, self.what)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na > 0 and nb > 0 else 0.0


def llama_embedding(args, model, text):
    out = subprocess.run([os.path.join(args.llama_bin, "llama-embedding"), "-m", model, "-p", text,
                          "--embd-output-format", "json", "--embd-normalize", "2", "-t", "1",
                          "-c", "256", "-b", "256", "-ub", "256"],
                         check=True, capture_output=True, timeout=120).stdout
    return json.loads(out.decode("utf-8", "replace"))["data"][0]["embedding"]


def check_embeddings(args, name, model):
    worst = 1.0
    with Server([args.pagoda, "serve", model, "--threads", "1"], "pagoda serve") as p:
        for text in TEXTS:
            mine = post(p.port, "/v1/embeddings", {"input": text})["data"][0]["embedding"]
            worst = min(worst, cosine(mine, llama_embedding(args, model, text)))
    ok = worst >= 0.9999
    print(f"{name:18s} embeddings: worst cosine {worst:.7f} over {len(TEXTS)} inputs  {'ok' if ok else 'FAIL'}")
    return ok


def random_strings(n, seed=7):
    rng = random.Random(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyz") * 4 + list("ABCXYZ0123456789 .,!?'-#") + \
        [" ", "  ", "\t", "\n", "\u00e9", "\u00fc", "\u00f1", "\u4e2d", "\u6587", "\u8a9e", "\u00c5", "\u2581",
         "<s>", "</s>", "<|user|>", "\U0001F600"]
    words = ["the", "hello", "world", "cat", "dog", "paris", "capital", "mat"]
    out = []
    for _ in range(n):
        parts = [rng.choice(words) if rng.random() < 0.3 else rng.choice(alphabet) for _ in range(rng.randint(1, 30))]
        out.append("".join(parts))
    return out


def check_unigram(args, model):
    bad = 0
    strings = random_strings(200)
    for s in strings:
        want = subprocess.run([os.path.join(args.llama_bin, "llama-tokenize"), "-m", model, "-p", s, "--ids",
                               "--log-disable"], check=True, capture_output=True, timeout=60).stdout
        want = json.loads(want.decode("utf-8", "replace").strip().splitlines()[-1])
        got = subprocess.run([args.pagoda, "tokenize", "--model", model, "--special", "--ids-only"],
                             input=s.encode(), check=True, capture_output=True, timeout=60).stdout.split()
        if [int(t) for t in got] != want:
            bad += 1
            if bad <= 5:
                print(f"  differs: {s!r}\n    pagoda {got}\n    llama  {want}")
    print(f"unigram token ids: {len(strings) - bad}/{len(strings)} strings identical  {'ok' if bad == 0 else 'FAIL'}")
    return bad == 0


def check_rerank(args, name, model, strict):
    with Server([args.pagoda, "serve", model, "--threads", "1"], "pagoda serve") as p, \
         Server([os.path.join(args.llama_bin, "llama-server"), "-m", model, "--host", "127.0.0.1", "-t", "1",
                 "-c", "1024", "-np", "1", "--rerank"], "llama-server") as l:
        body = {"query": QUERY, "documents": DOCS, "top_n": len(DOCS)}
        mine = {r["index"]: r["relevance_score"] for r in post(p.port, "/v1/rerank", body)["results"]}
        theirs = {r["index"]: r["relevance_score"] for r in post(l.port, "/v1/rerank", body)["results"]}
    diff = max(abs(mine[i] - theirs[i]) for i in range(len(DOCS)))
    ok = diff <= 1e-3
    verdict = ("ok" if ok else "FAIL") if strict else "(token types differ by design)"
    print(f"{name:18s} rerank: max |score difference| {diff:.2e}  pagoda {[round(mine[i], 4) for i in range(len(DOCS))]}"
          f" llama {[round(theirs[i], 4) for i in range(len(DOCS))]}  {verdict}")
    return ok or not strict


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bin")
    ap.add_argument("--pagoda", default="build/pagoda")
    ap.add_argument("--keep", help="write the models here (default: a temporary folder)")
    args = ap.parse_args()
    workdir = args.keep or tempfile.mkdtemp(prefix="encoder-fidelity-")
    os.makedirs(workdir, exist_ok=True)
    ok = True
    for name, flags in {**MODELS, **RERANKERS}.items():
        model = os.path.join(workdir, name + ".gguf")
        subprocess.run([args.pagoda, "make-model", *flags, *SHAPE, "--seed", "3", "--output", model, "--quiet"],
                       check=True)
        if name in MODELS:
            ok &= check_embeddings(args, name, model)
        else:
            ok &= check_rerank(args, name, model, strict=name.startswith("xlm"))
    ok &= check_unigram(args, os.path.join(workdir, "xlm-roberta-mean.gguf"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
