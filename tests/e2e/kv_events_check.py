"""e2e: a subscriber rebuilds pagoda's prefix cache from its --kv-events stream alone.
Starts `pagoda serve` on stories260K with a KV cache small enough to evict, subscribes before
any request, runs a mixed workload (4 shared prefixes with distinct tails, unrelated prompts,
concurrent clients, long prompts that push old blocks out), and then requires: the set of
cached block hashes the events leave equals the server's own prefix cache (GET
/v1/cache/blocks), every BlockStored hash is the indexer's hash over its token ids, the
sequence numbers have no gap, and blocks were both stored and removed (evictions happened).
Exits 77 (skipped) without python3-zmq, python3-msgpack or the testdata model.
Usage: kv_events_check.py PAGODA_BINARY MODEL"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kv_events_lib as kv  # noqa: E402

try:
    import msgpack  # noqa: F401
    import zmq
except ImportError as e:
    print(f"skipped: {e.name} missing (Debian: apt-get install python3-zmq python3-msgpack)")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, path, body=None, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def main():
    binary, model = sys.argv[1], sys.argv[2]
    if not os.path.exists(model):
        print(f"skipped: {model} missing (clone ../shared beside the repo to run it)")
        return 77
    port, ev_port = free_port(), free_port()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(f"tcp://127.0.0.1:{ev_port}")  # the server connects (a non-wildcard endpoint)
    log = open(f"/tmp/pagoda_kv_events_{os.getpid()}.log", "w")
    server = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--model", model,
                               "--kv-cache-memory", "640KiB", "--kv-events", f"tcp://127.0.0.1:{ev_port}",
                               "--max-seqs", "4"], stdout=log, stderr=subprocess.STDOUT)
    view = kv.CacheView()
    topics = set()

    def drain(seconds):
        end = time.time() + seconds
        while time.time() < end:
            if sub.poll(50):
                topic, seq, batch = kv.decode(sub.recv_multipart())
                topics.add(topic)
                view.apply(seq, batch, check_hashes=True)

    try:
        for _ in range(300):  # up to 30 s for the model to load
            try:
                http(port, "/health", timeout=1)
                break
            except Exception:
                drain(0.1)
        else:
            raise SystemExit("server did not start; see " + log.name)
        drain(0.5)  # the subscription settles before the first request
        prefixes = [f"Once upon a time there was a {w} who lived in a small house by the sea. " * 3
                    for w in ("cat", "dog", "girl", "bird")]
        jobs = []
        for i in range(24):
            if i % 3 == 2:
                prompt = f"Story number {i}: " + "the sun was bright and the sky was blue. " * (4 + i % 5)
            else:
                prompt = prefixes[i % 4] + f"One day number {i} happened."
            jobs.append({"prompt": prompt, "max_tokens": 8 + i % 7, "temperature": 0})
        with ThreadPoolExecutor(4) as pool:
            for answer in pool.map(lambda b: http(port, "/v1/completions", b), jobs):
                assert answer["choices"][0]["text"] is not None
        # The server is idle: its cache and the events' view must agree.
        deadline = time.time() + 10
        while True:
            drain(0.3)
            server_view = http(port, "/v1/cache/blocks")
            if set(server_view["block_hashes"]) == view.blocks or time.time() > deadline:
                break
        server_set = set(server_view["block_hashes"])
        print(f"topic {sorted(topics)}: stored {view.stored}, removed {view.removed}, cleared {view.cleared}, "
              f"cached now {len(view.blocks)} (server: {server_view['blocks']} blocks, {len(server_set)} hashes)")
        assert server_view["blocks"] == len(server_set), "a cached block has no event hash"
        assert view.blocks == server_set, (f"events' view differs: {len(view.blocks - server_set)} extra, "
                                           f"{len(server_set - view.blocks)} missing")
        assert view.bad_hashes == 0, f"{view.bad_hashes} BlockStored hashes differ from the indexer's"
        assert view.gaps == 0, "sequence numbers skipped"
        assert view.stored > 0 and view.removed > 0, "the workload must store and evict blocks"
        assert all(t.startswith("kv@") and t.count("@") == 2 for t in topics), topics
        print("ok")
        return 0
    finally:
        server.terminate()
        server.wait(timeout=30)
        sub.close(0)
        ctx.term()


if __name__ == "__main__":
    sys.exit(main())
