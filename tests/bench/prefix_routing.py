"""Scale-out measurement: 3 pagoda replicas behind a router that sees only what the gateway
protocol gives it (each replica's /metrics gauges under vLLM's names and its --kv-events
stream), 16 users over 4 shared system prompts, prefix-aware routing against round robin.
Not a test: run by hand, figures go to docs/performance.md.

  /usr/bin/python3 tests/bench/prefix_routing.py build/pagoda MODEL.gguf [--rounds 6]

Modes, each on freshly started replicas:
  prefix   this router: the replica holding the longest run of the prompt's leading block
           hashes (from the events; the prompt tokenized by a replica's /tokenize and hashed as
           llm-d's indexer does) wins, less a load penalty from vllm:num_requests_waiting,
           vllm:num_requests_running and vllm:kv_cache_usage_perc
  rr       this router, round robin (the same proxy path, so the routing alone differs)
  haproxy  haproxy (Debian) round robin, the baseline without a Python proxy in the path
Reports the prefix-cache hit rate (pagoda_prefix_cache_hit_tokens_total over
pagoda_prompt_tokens_total, all replicas) and TTFT: at the client (through the router) and as
the replicas measure it (pagoda_time_to_first_token_seconds)."""
import argparse
import http.client
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import kv_events_lib as kv  # noqa: E402
import zmq  # noqa: E402

BLOCK = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body and json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def scrape(port):
    """{series name: value} of the unlabelled-by-extra-labels series of one /metrics page."""
    out = {}
    for line in get(port, "/metrics").splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name = line[:line.index("{")]
        if name.endswith("_bucket"):
            continue
        out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class Replicas:
    def __init__(self, binary, model, n, kv_memory, ev_port):
        self.ports = [free_port() for _ in range(n)]
        self.procs = []
        for i, p in enumerate(self.ports):
            args = [binary, "serve", "--host", "127.0.0.1", "--port", str(p), "--model", model,
                    "--kv-cache-memory", kv_memory, "--ctx-size", "512", "--threads", "1", "--max-seqs", "8"]
            if ev_port:
                args += ["--kv-events", f"tcp://127.0.0.1:{ev_port}", "--kv-events-topic", f"kv@replica{i}@m"]
            self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in self.ports:
            for _ in range(300):
                try:
                    get(p, "/health")
                    break
                except Exception:
                    time.sleep(0.1)

    def totals(self):
        t = {}
        for p in self.ports:
            for k, v in scrape(p).items():
                t[k] = t.get(k, 0.0) + v
        return t

    def stop(self):
        for pr in self.procs:
            pr.terminate()
        for pr in self.procs:
            pr.wait(timeout=30)


class Router:
    """An HTTP proxy choosing a replica per request by the policy."""

    def __init__(self, replicas, policy, sub=None):
        self.ports, self.policy, self.sub = replicas.ports, policy, sub
        self.views = {f"replica{i}": kv.CacheView() for i in range(len(self.ports))}
        self.gauges = {p: {} for p in self.ports}
        self.rr = itertools.cycle(range(len(self.ports)))
        self.lock = threading.Lock()
        self.tokens = {}
        self.stop = False
        self.threads = [threading.Thread(target=self.watch_metrics, daemon=True)]
        if sub is not None:
            self.threads.append(threading.Thread(target=self.watch_events, daemon=True))
        for t in self.threads:
            t.start()

    def watch_metrics(self):
        while not self.stop:
            for p in self.ports:
                try:
                    g = scrape(p)
                    self.gauges[p] = {k: g.get(k, 0.0) for k in
                                      ("vllm:num_requests_waiting", "vllm:num_requests_running",
                                       "vllm:kv_cache_usage_perc")}
                except Exception:
                    pass
            time.sleep(0.05)

    def watch_events(self):
        while not self.stop:
            if self.sub.poll(50):
                topic, seq, batch = kv.decode(self.sub.recv_multipart())
                with self.lock:
                    self.views[topic.split("@")[1]].apply(seq, batch)

    def pick(self, prompt):
        if self.policy == "rr":
            with self.lock:
                return self.ports[next(self.rr)]
        if prompt not in self.tokens:
            self.tokens[prompt] = json.loads(get(self.ports[0], "/tokenize", {"content": prompt}))["tokens"]
        hashes = kv.prompt_hashes(self.tokens[prompt], BLOCK)
        best, best_score = None, None
        with self.lock:
            for i, p in enumerate(self.ports):
                blocks = self.views[f"replica{i}"].blocks
                matched = next((k for k, h in enumerate(hashes) if h not in blocks), len(hashes))
                g = self.gauges[p]
                load = g.get("vllm:num_requests_waiting", 0) + g.get("vllm:num_requests_running", 0)
                score = 2.0 * matched / max(1, len(hashes)) - 0.15 * load - 0.5 * g.get("vllm:kv_cache_usage_perc", 0)
                if best_score is None or score > best_score:
                    best, best_score = p, score
        return best

    def serve(self):
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                port = router.pick(json.loads(body)["prompt"])
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.getheader("Content-Type", "text/event-stream"))
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                conn.close()

        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self.port

    def close(self):
        self.stop = True
        self.httpd.shutdown()


def haproxy(ports):
    port = free_port()
    cfg = f"/tmp/pagoda_prefix_routing_{os.getpid()}.cfg"
    with open(cfg, "w") as f:
        f.write("defaults\n  mode http\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n"
                f"frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\nbackend b\n  balance roundrobin\n")
        for i, p in enumerate(ports):
            f.write(f"  server r{i} 127.0.0.1:{p}\n")
    proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):  # until it listens (bounded: 10 s)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return port, proc


def user(port, system, u, rounds, ttfts):
    for r in range(rounds):
        prompt = system + f" Then user {u} asked question {r}: what happened next in the story?"
        body = json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True})
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = None
        while True:
            line = resp.readline()
            if not line:
                break
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter() - t0
            if line.startswith(b"data: [DONE]"):
                break
        conn.close()
        ttfts.append(first if first is not None else float("nan"))


def run(mode, args, systems):
    ctx = zmq.Context()
    sub = ev_port = None
    if mode == "prefix":
        ev_port = free_port()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sub.bind(f"tcp://127.0.0.1:{ev_port}")
    reps = Replicas(args.binary, args.model, 3, args.kv_memory, ev_port)
    router = hp = None
    try:
        if mode == "haproxy":
            port, hp = haproxy(reps.ports)
        else:
            router = Router(reps, mode, sub)
            port = router.serve()
        before = reps.totals()
        ttfts = []
        t0 = time.time()
        with ThreadPoolExecutor(16) as pool:
            for f in [pool.submit(user, port, systems[u % 4], u, args.rounds, ttfts) for u in range(16)]:
                f.result()
        wall = time.time() - t0
        after = reps.totals()
        d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        hit = d["pagoda_prefix_cache_hit_tokens_total"] / max(1, d["pagoda_prompt_tokens_total"])
        server_ttft = d["pagoda_time_to_first_token_seconds_sum"] / max(1, d["pagoda_time_to_first_token_seconds_count"])
        ttfts.sort()
        return {"mode": mode, "requests": len(ttfts), "hit_rate": round(hit, 3),
                "ttft_client_p50_ms": round(1000 * statistics.median(ttfts), 1),
                "ttft_client_p90_ms": round(1000 * ttfts[int(0.9 * (len(ttfts) - 1))], 1),
                "ttft_server_mean_ms": round(1000 * server_ttft, 1), "wall_s": round(wall, 1),
                "prompt_tokens": int(d["pagoda_prompt_tokens_total"])}
    finally:
        if router:
            router.close()
        if hp:
            hp.terminate()
            hp.wait()
        reps.stop()
        if sub is not None:
            sub.close(0)
        ctx.term()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--kv-memory", default="400KiB")  # 40 blocks: about 2 of the 4 prompts
    ap.add_argument("--modes", default="prefix,rr,haproxy")
    args = ap.parse_args()
    topics = ["a cat named Tom", "a little girl named Lily", "a big brown dog", "a tiny red bird"]
    systems = [(f"This is a story about {t}. " + f"Every day {t} went to the park to play with friends and " +
                "looked at the flowers, the trees and the sky. ") * 3 for t in topics]
    for mode in args.modes.split(","):
        print(json.dumps(run(mode, args, systems)), flush=True)


if __name__ == "__main__":
    main()
