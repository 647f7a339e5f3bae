# Shell functions the server benchmarks share (sourced, not run): waiting for a server started in
# the background to answer GET /health on loopback.

# wait_healthy URL PID LOG: returns when URL/health answers; fails (after printing LOG's tail)
# when the process PID exits first or after 120 s.
wait_healthy() {
  local url=$1 pid=$2 log=$3
  for _ in $(seq 1 240); do
    python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$url/health" \
      2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited:" >&2; tail -20 "$log" >&2; return 1; }
    sleep 0.5
  done
  echo "server at $url did not become healthy" >&2; tail -20 "$log" >&2; return 1
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
  python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}
