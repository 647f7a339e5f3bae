"""Reading `pagoda bench --json` reports from the benchmark scripts."""
import json


def run_summary(path):
    """The report's run summary: the first object holding output_throughput ("points"[0] for one run)."""
    def find(o):
        if isinstance(o, dict):
            if "output_throughput" in o:
                return o
            o = list(o.values())
        if isinstance(o, list):
            for v in o:
                r = find(v)
                if r:
                    return r
        return None
    return find(json.load(open(path)))
