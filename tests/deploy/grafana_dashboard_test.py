#!/usr/bin/env python3
"""deploy/grafana/colibri-dashboard.json names only metrics the servers
export: a node and a coordinator (with that node) are started with
--health-metrics, a generation runs, both /metrics are scraped, and every
colibri_* name in a panel query must be among the scraped families (a
histogram also as _bucket, _sum, _count). A dashboard with a misspelled
name must fail the same check.

Usage: grafana_dashboard_test.py SOURCE_DIR BUILD_DIR FIXTURES_DIR. Exit 77: skipped.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

src, build = sys.argv[1], sys.argv[2]
fixtures = os.environ.get("COLIBRI_FIXTURES_DIR", sys.argv[3])
model = os.path.join(fixtures, "models", "qwen3moe-tiny-f32.gguf")
if not os.path.exists(model):
    print(f"SKIP: fixture {model} not found")
    sys.exit(77)


def start(argv, log):
    proc = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        with open(log) as f:
            text = f.read()
        if "health listening on " in text:
            return proc, text
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"FAIL: {argv[0]} did not start:\n{text}")


def families(address):
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        names.add(name)
        if kind == "histogram":
            names.update(name + s for s in ("_bucket", "_sum", "_count"))
    return names


def unknown_names(dashboard, exported):
    missing = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in re.findall(r"\bcolibri_[a-z0-9_]+", target["expr"]):
                if name not in exported:
                    missing.append(f"{panel['title']}: {name}")
    return missing


with tempfile.TemporaryDirectory() as tmp:
    node, text = start([os.path.join(build, "expert_node", "colibri-expert-node"), "--listen",
                        "127.0.0.1:0", "--data-dir", os.path.join(tmp, "store"),
                        "--health-listen", "127.0.0.1:0", "--health-metrics"],
                       os.path.join(tmp, "node.log"))
    node_grpc = text.split("listening on ", 1)[1].split()[0]
    node_health = text.split("health listening on ", 1)[1].split()[0]
    coord, text = start([os.path.join(build, "coordinator", "colibri-coordinator"), "serve",
                         "-m", model, "--listen", "127.0.0.1:0", "--nodes", node_grpc,
                         "--health-listen", "127.0.0.1:0", "--health-metrics", "--threads", "1"],
                        os.path.join(tmp, "coordinator.log"))
    coord_grpc = re.search(r"^listening on (\S+)$", text, re.M).group(1)
    coord_health = text.split("health listening on ", 1)[1].split()[0]
    try:
        subprocess.run([os.path.join(build, "client", "colibri-client"), "--coordinator", coord_grpc,
                        "generate", "-n", "4", "hello"], check=True, capture_output=True, timeout=60)
        exported = families(coord_health) | families(node_health)
    finally:
        coord.kill()
        node.kill()

with open(os.path.join(src, "deploy", "grafana", "colibri-dashboard.json")) as f:
    dashboard = json.load(f)
failures = 0
missing = unknown_names(dashboard, exported)
queries = sum(len(p.get("targets", [])) for p in dashboard["panels"])
if missing:
    failures += 1
    print("FAIL: names the servers do not export:\n  " + "\n  ".join(missing))
if queries < 8:
    failures += 1
    print(f"FAIL: only {queries} queries")
broken = json.loads(json.dumps(dashboard).replace("colibri_queue_depth", "colibri_queue_dept"))
if not unknown_names(broken, exported):
    failures += 1
    print("FAIL: a misspelled metric passed: the check is blind")
if not failures:
    print(f"ok: {queries} queries over {len(dashboard['panels'])} panels name exported metrics")
sys.exit(1 if failures else 0)
