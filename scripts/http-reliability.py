#!/usr/bin/python3
"""The HTTP reliability checks against the real `pagoda serve` binary (the ctest
label `reliability` runs the same against a test double in process), printing figures:

  slowloris   500 connections sending a header line every second and 500 sending a body a few
              bytes at a time, held open: latency of normal requests meanwhile
  idle        2,000 idle sockets held open: latency of normal requests meanwhile
  flood       64 keep-alive clients, 600 requests, with --max-seqs 4 --max-queue 8: how many
              were served, how many got 429 and how fast, and pagoda_requests_waiting sampled
  drain       SIGTERM while a request runs: /health meanwhile, and the request's outcome
  bodies      rounds of 32 concurrent chat requests with ~7 MB bodies (each read, parsed,
              tokenized and refused with 400: far longer than the context): the server's RSS
              before, at its peak, and after 5 idle seconds

Run: /usr/bin/python3 scripts/http-reliability.py [--binary build/pagoda] [--only NAME...]
     [--concurrent 32] [--rounds 2] [--mb 7]
Loopback only; the random-weight model is written to a temporary folder.
"""
import argparse
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, binary, model, flags):
        self.port = free_port()
        cmd = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(self.port),
               "--threads", "1", "--log-level", "warn"] + flags
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"the server exited with {self.proc.returncode}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("the server did not become healthy")

    def request(self, method, path, body=None, timeout=30):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, path, body, {"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def metric(self, name, **labels):
        """The sample of `name` whose labels include `labels` (every metric also carries
        model_name), or None."""
        text = self.request("GET", "/metrics")[1].decode()
        for line in text.splitlines():
            if not (line.startswith(name + " ") or line.startswith(name + "{")):
                continue
            if all(f'{k}="{v}"' in line.split(" ")[0] for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def chat_body(max_tokens, content="hello", ignore_eos=False):
    return json.dumps({"max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": ignore_eos,
                       "messages": [{"role": "user", "content": content}]})


CHAT = chat_body(4)


def timed_chat(srv, n=5):
    out = []
    for _ in range(n):
        t0 = time.time()
        status, _ = srv.request("POST", "/v1/chat/completions", CHAT)
        out.append((status, round((time.time() - t0) * 1000, 1)))
    return out


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def slowloris(binary, model):
    srv = Server(binary, model, ["--header-timeout", "10"])
    try:
        heads, bodies = [], []
        for _ in range(500):
            h = connect(srv.port)
            h.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            heads.append(h)
            b = connect(srv.port)
            b.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 50000\r\n\r\n{\"mo")
            bodies.append(b)
        latencies = []
        t_end = time.time() + 4
        while time.time() < t_end:  # a header line and a few body bytes each second
            for h in heads:
                h.send(b"X-Slow: 1\r\n")
            for b in bodies:
                b.send(b"   ")
            latencies += timed_chat(srv, 2)
            time.sleep(0.5)
        time.sleep(8)  # past the header timeout (10 s from the first byte) and the body's grace
        cut = {phase: int(srv.metric("pagoda_http_slow_clients_total", phase=phase) or 0)
               for phase in ("headers", "body")}
        for s in heads + bodies:
            s.close()
        return {"normal_requests_status_ms": latencies,
                "max_ms": max(ms for _, ms in latencies), "slow_clients_cut": cut}
    finally:
        srv.stop()


def idle(binary, model):
    srv = Server(binary, model, [])
    try:
        socks = [connect(srv.port) for _ in range(2000)]
        time.sleep(0.5)
        open_now = srv.metric("pagoda_http_connections_open")
        latencies = timed_chat(srv, 5)
        for s in socks:
            s.close()
        return {"idle_sockets": len(socks), "connections_open": open_now,
                "normal_requests_status_ms": latencies,
                "max_ms": max(ms for _, ms in latencies)}
    finally:
        srv.stop()


def flood(binary, model):
    srv = Server(binary, model, ["--max-seqs", "4", "--max-queue", "8"])
    body = chat_body(64, ignore_eos=True)
    results = []
    lock = threading.Lock()
    stop_sampling = threading.Event()
    waiting_samples = []

    def client(n):
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
        for _ in range(n):
            t0 = time.time()
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            ms = (time.time() - t0) * 1000
            with lock:
                results.append((r.status, ms, r.getheader("Retry-After")))
        c.close()

    def sampler():
        while not stop_sampling.is_set():
            try:
                waiting_samples.append(srv.metric("pagoda_requests_waiting"))
            except OSError:
                pass
            time.sleep(0.05)

    try:
        s = threading.Thread(target=sampler)
        s.start()
        threads = [threading.Thread(target=client, args=(600 // 64 + (1 if i < 600 % 64 else 0),))
                   for i in range(64)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
        stop_sampling.set()
        s.join()
        busy = sorted(ms for st, ms, _ in results if st == 429)
        ok = sorted(ms for st, ms, _ in results if st == 200)
        return {"requests": len(results), "ok": len(ok), "429": len(busy),
                "other": len(results) - len(ok) - len(busy),
                "429_without_retry_after": sum(1 for st, _, ra in results if st == 429 and not ra),
                "429_ms_p50": round(busy[len(busy) // 2], 1) if busy else None,
                "429_ms_p99": round(busy[int(len(busy) * 0.99)], 1) if busy else None,
                "429_ms_max": round(busy[-1], 1) if busy else None,
                "429_over_100ms": sum(1 for ms in busy if ms > 100),
                "ok_ms_max": round(ok[-1], 1) if ok else None,
                "waiting_max": max(w for w in waiting_samples if w is not None),
                "seconds": round(elapsed, 1)}
    finally:
        srv.stop()


def drain(binary, model):
    # One sequence at a time, four long requests: SIGTERM lands while they run and wait.
    srv = Server(binary, model, ["--shutdown-grace", "60", "--max-seqs", "1"])
    body = chat_body(900, ignore_eos=True)
    outcomes = []

    def long_request():
        status, data = srv.request("POST", "/v1/chat/completions", body, timeout=120)
        outcomes.append((status, json.loads(data).get("usage", {}).get("completion_tokens")))

    try:
        threads = [threading.Thread(target=long_request) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        sent = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        health, first_503_ms = [], None
        while any(t.is_alive() for t in threads) and len(health) < 10:
            try:
                status, data = srv.request("GET", "/health", timeout=2)
                health.append((status, json.loads(data)))
                if status == 503 and first_503_ms is None:
                    first_503_ms = round((time.monotonic() - sent) * 1000, 1)
            except OSError as e:
                health.append(str(e))
            time.sleep(0.1)
        for t in threads:
            t.join()
        return {"health_during_drain": health, "first_503_ms_after_sigterm": first_503_ms,
                "requests_in_flight": outcomes,
                "exit_code": srv.proc.wait(timeout=60)}
    finally:
        srv.stop()


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def bodies(binary, model, concurrent=32, rounds=2, mb=7.0, idle_s=5.0):
    srv = Server(binary, model, [])
    try:
        before = rss_mib(srv.proc.pid)
        words = "lorem ipsum dolor sit amet " * int(mb * 1e6 / 27)
        body = chat_body(1, words)
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss_mib(srv.proc.pid))
                time.sleep(0.02)

        statuses = {}
        lock = threading.Lock()

        def post():
            t_req = time.time()
            try:
                status = srv.request("POST", "/v1/chat/completions", body, timeout=300)[0]
            except OSError as e:
                status = f"error: {e}"
            with lock:
                statuses.setdefault(str(status), []).append(time.time() - t_req)

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.time()
        for _ in range(rounds):
            threads = [threading.Thread(target=post) for _ in range(concurrent)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        elapsed = time.time() - t0
        after_load = rss_mib(srv.proc.pid)
        time.sleep(idle_s)
        done.set()
        sampler.join()
        return {"body_mb": round(len(body) / 1e6, 2), "concurrent": concurrent, "rounds": rounds,
                # per status: how many, and their answer times (median, max) in seconds
                "statuses": {k: {"n": len(v), "median_s": round(sorted(v)[len(v) // 2], 2),
                                 "max_s": round(max(v), 2)} for k, v in statuses.items()},
                "seconds": round(elapsed, 1),
                "rss_mib_before": round(before, 1), "rss_mib_peak": round(peak[0], 1),
                "rss_mib_after_load": round(after_load, 1),
                f"rss_mib_after_{idle_s:g}s_idle": round(rss_mib(srv.proc.pid), 1)}
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/pagoda")
    ap.add_argument("--only", nargs="*", default=["slowloris", "idle", "flood", "drain", "bodies"])
    ap.add_argument("--concurrent", type=int, default=32, help="bodies: requests at once")
    ap.add_argument("--rounds", type=int, default=2, help="bodies: rounds")
    ap.add_argument("--mb", type=float, default=7.0, help="bodies: body size")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))
    checks = {"slowloris": slowloris, "idle": idle, "flood": flood, "drain": drain,
              "bodies": lambda b, m: bodies(b, m, a.concurrent, a.rounds, a.mb)}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "rel.gguf")
        subprocess.run([a.binary, "make-model", "--output", model, "--quiet"], check=True)
        for name in a.only:
            print(json.dumps({name: checks[name](a.binary, model)}), flush=True)


if __name__ == "__main__":
    main()
