#!/usr/bin/python3
"""Side by side with llama.cpp on identical GGUF files written by `pagoda make-model`: greedy
continuations of 8 prompts x 64 tokens through `pagoda serve` (/v1/completions, logprobs 1) and
llama.cpp's `llama-server` (/completion, n_probs 1), both on loopback, 1 CPU thread each, f16 KV
cache. Reports per architecture: prompts whose 64 tokens are identical, the first divergence, and
the largest |logprob difference| of the chosen tokens over the positions where both agree so far.
Tokens are compared as the text a JSON client sees (pagoda's logprobs tokens; llama-server's ids
through its /detokenize), so two different bytes that are each invalid UTF-8 alone (both shown
as U+FFFD) would compare equal; llama-server gives no logprob for a token that leaves the text
ending in a cut-off UTF-8 character, and such positions are left out of the logprob figure.

usage: scripts/compare-llamacpp.py LLAMA_BIN_DIR [--pagoda build/pagoda] [--arch gemma2,phi3]
                                  [--type f32] [--keep DIR]
LLAMA_BIN_DIR holds llama-server (a build of llama.cpp made outside this repository).
The models: gemma2 with 26 layers (llama.cpp accepts only the published Gemma 2 layer counts),
dim 256, window 32 (the prompts and continuations run past it); phi3 with LongRoPE factors and
window 64; both with the built-in byte-level vocabulary. Exit status 1 when any prompt diverges.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from loopback import free_port, post, wait_ready

PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):",
    "In 1492, Columbus",
    "Q: What is the capital of France?\nA:",
    "1, 2, 3, 4, 5,",
    "The weather today is",
    "<html><body>",
]
N_TOKENS = 64

MODELS = {
    # Baseline: an architecture pagoda supported before, to tell arch-specific gaps from
    # weight-type ones (--arch llama,gemma2,phi3).
    "llama": ["--arch", "llama", "--layers", "4", "--dim", "256", "--ff", "512", "--heads", "4",
              "--kv-heads", "2", "--ctx", "2048"],
    "gemma2": ["--arch", "gemma2", "--layers", "26", "--dim", "256", "--ff", "512", "--heads", "4",
               "--kv-heads", "2", "--sliding-window", "32", "--ctx", "2048"],
    "phi3": ["--arch", "phi3", "--layers", "4", "--dim", "256", "--ff", "512", "--heads", "4",
             "--kv-heads", "4", "--sliding-window", "64", "--rope-freqs", "longrope", "--ctx", "4096"],
}


def utf8_complete_len(b):
    """llama-server's validate_utf8: the length without a multi-byte character cut off at the end."""
    for i in range(1, min(4, len(b)) + 1):
        c = b[len(b) - i]
        need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else 4 if c & 0xF8 == 0xF0 else 0
        if need and i < need:
            return len(b) - i
    return len(b)


class Llama:
    def __init__(self, port):
        self.port, self.pieces = port, {}

    def piece(self, tok):
        """A token's bytes, cached. make-model's built-in vocabulary has byte b at id b (which
        /detokenize cannot return alone when it is not valid UTF-8), control tokens at 256-259,
        and valid text above."""
        if tok not in self.pieces:
            self.pieces[tok] = bytes([tok]) if tok < 256 else \
                post(self.port, "/detokenize", {"tokens": [tok]})["content"].encode()
        return self.pieces[tok]

    def run(self, prompt):
        """Greedy token texts and their logprobs (None where llama-server gives none: it reports
        probabilities only for tokens after which the text is complete UTF-8)."""
        r = post(self.port, "/completion", {"prompt": prompt, "n_predict": N_TOKENS, "temperature": 0,
                                            "n_probs": 1, "cache_prompt": False, "return_tokens": True})
        probs = iter(r.get("completion_probabilities", []))
        text, logprobs = b"", []
        for tok in r["tokens"]:
            if not 256 <= tok < 260:  # the control tokens add no text in llama-server's output
                text += self.piece(tok)
            logprobs.append(next(probs)["logprob"] if utf8_complete_len(text) == len(text) else None)
        # As a JSON client sees each token (pagoda's logprobs tokens): invalid UTF-8 replaced.
        return [self.piece(t).decode("utf-8", "replace") for t in r["tokens"]], logprobs


def pagoda_run(port, prompt):
    r = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": N_TOKENS, "temperature": 0,
                                       "logprobs": 1})
    lp = r["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"]


def compare(arch, args, workdir):
    model = os.path.join(workdir, f"{arch}.gguf")
    subprocess.run([args.pagoda, "make-model", *MODELS[arch], "--type", args.type, "--seed", "1",
                    "--output", model, "--quiet"], check=True)
    lport, pport = free_port(), free_port()
    llama = subprocess.Popen([os.path.join(args.llama_bin, "llama-server"), "-m", model, "--port", str(lport),
                              "--host", "127.0.0.1", "-t", "1", "-c", "2048", "-np", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pagoda = subprocess.Popen([args.pagoda, "serve", model, "--port", str(pport), "--threads", "1",
                               "--ctx-size", "2048"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(lport, llama, "llama-server")
        wait_ready(pport, pagoda, "pagoda serve")
        same, worst, lines = 0, 0.0, []
        llama_server = Llama(lport)
        for prompt in PROMPTS:
            lt, ll = llama_server.run(prompt)
            pt, pl = pagoda_run(pport, prompt)
            n = 0
            while n < min(len(lt), len(pt)) and lt[n] == pt[n]:
                n += 1
            diff = max((abs(a - b) for a, b in zip(ll[:n], pl[:n]) if a is not None), default=0.0)
            worst = max(worst, diff)
            identical = n == len(lt) == len(pt)
            same += identical
            lines.append(f"  {prompt[:32]!r:36} {'identical' if identical else f'diverges at {n}'}"
                         f" ({len(pt)} vs {len(lt)} tokens), max |dlogprob| {diff:.2e}")
        print(f"{arch} ({args.type}): {same}/{len(PROMPTS)} prompts identical over {N_TOKENS} greedy tokens,"
              f" max |logprob difference| {worst:.2e}")
        print("\n".join(lines))
        return same == len(PROMPTS)
    finally:
        for p in (llama, pagoda):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("llama_bin")
    ap.add_argument("--pagoda", default="build/pagoda")
    ap.add_argument("--arch", default="gemma2,phi3")
    ap.add_argument("--type", default="f32")
    ap.add_argument("--keep", help="write the models here and keep them")
    args = ap.parse_args()
    workdir = args.keep or tempfile.mkdtemp(prefix="pagoda-vs-llama-")
    os.makedirs(workdir, exist_ok=True)
    ok = True
    for arch in args.arch.split(","):
        ok = compare(arch, args, workdir) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
