#!/usr/bin/env bash
# configs/kubernetes: every manifest parses as YAML, and the gateway's pieces carry the fields
# the Inference Extension needs: an InferencePool selecting the pods the Deployment labels, on
# the port it serves and with an endpoint picker that exists as a Service; an HTTPRoute to the
# pool; probes on /health; the engine-type label; the picker told every metric the model-server
# protocol names (queue, running, KV use, cache layout, LoRA), each a series pagoda exports; the
# KV event port the server publishes on. Exits 77 (skipped) without Debian's python3-yaml.
set -euo pipefail
py=/usr/bin/python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  echo "skipped: python3-yaml missing (Debian: apt-get install python3-yaml)"
  exit 77
fi
"$py" - configs/kubernetes server/http/metrics.cpp <<'PY'
import glob, re, sys, yaml
docs = []
for f in sorted(glob.glob(sys.argv[1] + "/*.yaml")):
    docs += [d for d in yaml.safe_load_all(open(f)) if d]
by = {}
for d in docs:
    by.setdefault(d["kind"], []).append(d)
def one(kind, name):
    hits = [d for d in by.get(kind, []) if d["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind} {name}: {len(hits)} found"
    return hits[0]
pool = by["InferencePool"][0]
assert pool["apiVersion"] == "inference.networking.k8s.io/v1", pool["apiVersion"]
server = one("Deployment", "pagoda")
pod = server["spec"]["template"]
for k, v in pool["spec"]["selector"]["matchLabels"].items():
    assert pod["metadata"]["labels"].get(k) == v, f"pool selects {k}={v}, pods lack it"
ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
for p in pool["spec"]["targetPorts"]:
    assert p["number"] in ports, f"pool port {p['number']} not served"
for c in pod["spec"]["containers"]:
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health", probe
epp = pool["spec"]["endpointPickerRef"]
svc = one("Service", epp["name"])
assert epp["port"]["number"] in {p["port"] for p in svc["spec"]["ports"]}, "picker port"
route = by["HTTPRoute"][0]
refs = [b for r in route["spec"]["rules"] for b in r["backendRefs"]]
assert any(b.get("kind") == "InferencePool" and b["name"] == pool["metadata"]["name"] for b in refs), "route"
cfg = yaml.safe_load(one("ConfigMap", "pagoda-epp-config")["data"]["config.yaml"])
assert cfg["kind"] == "EndpointPickerConfig"
declared = {p["type"] for p in cfg["plugins"]}
for prof in cfg["schedulingProfiles"]:
    for ref in prof["plugins"]:
        assert ref["pluginRef"] in declared, ref
assert pod["metadata"]["labels"].get("llm-d.ai/engine-type") == "vllm", "engine-type label"
assert server["spec"]["replicas"] >= 2, "replicas"
# The picker's metric flags: one per quantity of the protocol, each a gauge pagoda renders.
exported = set(re.findall(r'"(vllm:[a-z_]+)"', open(sys.argv[2]).read()))
epp = one("Deployment", "pagoda-epp")["spec"]["template"]["spec"]["containers"][0]
flags = dict(a[2:].split("=", 1) for a in epp["args"] if a.startswith("--") and "=" in a)
for flag in ("total-queued-requests-metric", "total-running-requests-metric", "kv-cache-usage-percentage-metric",
             "lora-info-metric", "cache-info-metric"):
    assert flag in flags, f"picker lacks --{flag}"
    assert flags[flag] in exported, f"--{flag}={flags[flag]} is not a series pagoda exports"
for scorer in ("queue-scorer", "kv-cache-utilization-scorer", "lora-affinity-scorer", "prefix-cache-scorer"):
    assert scorer in declared, scorer
# KV events: published on a port the pod declares.
c = pod["spec"]["containers"][0]
ev = c["args"][c["args"].index("--kv-events") + 1]
assert int(ev.rsplit(":", 1)[1]) in ports, "kv-events port not declared"
print(f"ok: {len(docs)} documents")
PY
