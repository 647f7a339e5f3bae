#!/usr/bin/python3
"""Memory under concurrent large request bodies (issue 15): starts `pagoda serve` on a loopback
port with a small random-weight model, sends rounds of N concurrent chat requests whose bodies
are about 7 MB each (a prompt far longer than the context: each is read, parsed, tokenized and
refused with 400), and reports the server's RSS before, at its peak, and after a few idle seconds.

Run: /usr/bin/python3 scripts/rss-large-bodies.py [--binary build/pagoda] [--concurrent 32]
     [--rounds 3] [--mb 7] [-- extra serve flags...]
Loopback only; the model is written to a temporary folder and removed afterwards.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_healthy(port, proc, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("the server did not become healthy")


def post(port, body, results):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        results.append(r.status)
    except OSError as e:
        results.append(f"error: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/pagoda")
    ap.add_argument("--concurrent", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=7.0)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before the last RSS")
    ap.add_argument("serve_flags", nargs="*", help="extra flags for pagoda serve (after --)")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "rss.gguf")
        subprocess.run([a.binary, "make-model", "--output", model, "--quiet"], check=True)
        port = free_port()
        cmd = [a.binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
               "--threads", "1", "--log-level", "warn"] + a.serve_flags
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(port, proc)
            before = rss_mib(proc.pid)
            words = "lorem ipsum dolor sit amet " * int(a.mb * 1e6 / 27)
            body = json.dumps({"model": "x", "max_tokens": 1,
                               "messages": [{"role": "user", "content": words}]})
            peak = before
            done = threading.Event()

            def sample():
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, rss_mib(proc.pid))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            statuses = []
            t0 = time.time()
            for _ in range(a.rounds):
                threads = [threading.Thread(target=post, args=(port, body, statuses))
                           for _ in range(a.concurrent)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            elapsed = time.time() - t0
            after_load = rss_mib(proc.pid)
            time.sleep(a.idle)
            done.set()
            sampler.join()
            idle = rss_mib(proc.pid)
            counts = {}
            for s in statuses:
                counts[s] = counts.get(s, 0) + 1
            print(json.dumps({
                "binary": a.binary, "serve_flags": a.serve_flags,
                "body_mb": round(len(body) / 1e6, 2), "concurrent": a.concurrent,
                "rounds": a.rounds, "statuses": {str(k): v for k, v in counts.items()},
                "seconds": round(elapsed, 1), "rss_mib_before": round(before, 1),
                "rss_mib_peak": round(peak, 1), "rss_mib_after_load": round(after_load, 1),
                f"rss_mib_after_{a.idle:g}s_idle": round(idle, 1)}, indent=1))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
