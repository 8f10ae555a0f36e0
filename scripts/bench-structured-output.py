#!/usr/bin/env python3
"""Decode speed of response_format json_schema against free text over HTTP.

Starts `colibri-coordinator serve` on loopback, sends a constrained completion
(an array of 40 strings of at most 12 characters, temperature 1.0) and right
after it an unconstrained one of the same number of tokens (ignore_eos), for
each of --pairs seeds, and prints the median and range of each's tokens per
second (wall time of the request, prompt included) and the first constrained
request's time (it builds the vocabulary's token trie). There is no target:
the issue sets none for constrained decode speed; the figure is the cost of
the mask per token.

With --compare-drafts it starts two servers instead, one with grammar drafts
(the default) and one with --no-grammar-drafts, optionally over --nodes N
expert nodes each (colibri-expert-node on loopback), and sends each seed's
constrained request (--schema strings: the array above; records: an array of
--items objects with keys, an enum and bounded values) to both, in alternating
order. It checks that both answer the same text, and prints per server the
median and range of tok/s (request wall time, prompt included), of expert
round trips per generated token (serve's /metrics, with nodes) and the drafts
accepted and rejected, then the ratio of the tok/s medians against the issue's
target of 1.3.

Usage: scripts/bench-structured-output.py [--coordinator PATH] [--model M.gguf]
           [--pairs 9] [--threads 1] [--compare-drafts [--schema strings|records]
           [--items 6] [--nodes N] [--temperature 1.0]]
"""
import argparse
import json
import re
import statistics
import subprocess
import time
import os
import tempfile
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 12},
                             "minItems": 40, "maxItems": 40}},
    "required": ["items"],
    "additionalProperties": False,
}


RECORDS_ITEM = {
    "type": "object",
    "properties": {
        "identifier": {"type": "integer", "minimum": 0, "maximum": 999},
        "display_name": {"type": "string", "maxLength": 8},
        "account_status": {"enum": ["active", "suspended", "pending_review"]},
        "email_verified": {"type": "boolean"},
    },
    "required": ["identifier", "display_name", "account_status", "email_verified"],
    "additionalProperties": False,
}


def records_schema(items):
    return {
        "type": "object",
        "properties": {"records": {"type": "array", "items": RECORDS_ITEM,
                                   "minItems": items, "maxItems": items}},
        "required": ["records"],
        "additionalProperties": False,
    }


def start(cmd, pattern, what):
    """Starts cmd; returns (process, the first group of the first stdout line matching)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        m = re.match(pattern, line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"{what} did not start: {' '.join(cmd)}")


def post(addr, body):
    req = urllib.request.Request(f"http://{addr}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    start_time = time.perf_counter()
    reply = json.load(urllib.request.urlopen(req))
    return reply, time.perf_counter() - start_time


def counters(addr):
    """(round trips summed over the nodes, drafts accepted, drafts rejected) from /metrics."""
    text = urllib.request.urlopen(f"http://{addr}/metrics").read().decode()
    trips = accepted = rejected = 0.0
    for line in text.splitlines():
        if line.startswith("colibri_node_round_trips_total"):
            trips += float(line.split()[-1])
        elif line.startswith('colibri_draft_tokens_total{outcome="accepted"}'):
            accepted = float(line.split()[-1])
        elif line.startswith('colibri_draft_tokens_total{outcome="rejected"}'):
            rejected = float(line.split()[-1])
    return trips, accepted, rejected


def cpu_seconds(pid):
    """User + system CPU seconds of process pid so far (every thread)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spread(values, unit, digits=0):
    return (f"median {statistics.median(values):.{digits}f}{unit}, "
            f"range {min(values):.{digits}f}-{max(values):.{digits}f}")


def compare_drafts(args):
    procs = []
    try:
        node_args = []
        if args.nodes > 0:
            node_bin = os.path.join(os.path.dirname(os.path.dirname(args.coordinator)),
                                    "expert_node", "colibri-expert-node")
            data = tempfile.mkdtemp(prefix="bench-structured-")
            addrs = []
            for i in range(args.nodes):
                proc, addr = start([node_bin, "--listen", "127.0.0.1:0", "--data-dir",
                                    f"{data}/node{i}", "--node-id", f"bench{i}", "--threads", "1"],
                                   r"listening on (.*)", f"node {i}")
                procs.append(proc)
                addrs.append(addr)
            node_args = ["--nodes", ",".join(addrs)]
        servers = {}
        pids = {}
        for name, flags in (("grammar drafts", []), ("no grammar drafts", ["--no-grammar-drafts"])):
            proc, addr = start([args.coordinator, "serve", "--model", args.model, "--listen",
                                "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--threads",
                                str(args.threads)] + node_args + flags,
                               r"http listening on (.*)", name)
            procs.append(proc)
            servers[name] = addr
            pids[name] = proc.pid
        schema = SCHEMA if args.schema == "strings" else records_schema(args.items)
        body = {"prompt": "The small birds of the valley", "temperature": args.temperature,
                "max_tokens": args.max_tokens,
                "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
        for addr in servers.values():  # warm-up: the token trie and the masks of the grammar
            post(addr, {**body, "seed": 0})
        rates = {name: [] for name in servers}
        trips = {name: [] for name in servers}
        cpu = {name: [] for name in servers}
        drafts = {name: [0.0, 0.0] for name in servers}
        texts = {}
        names = list(servers)
        for i in range(args.pairs):
            order = names if i % 2 == 0 else names[::-1]
            for name in order:
                addr = servers[name]
                before = counters(addr)
                cpu_before = cpu_seconds(pids[name])
                reply, seconds = post(addr, {**body, "seed": i + 1})
                cpu_after = cpu_seconds(pids[name])
                after = counters(addr)
                n = reply["usage"]["completion_tokens"]
                cpu[name].append(1000 * (cpu_after - cpu_before) / n)
                rates[name].append(n / seconds)
                trips[name].append((after[0] - before[0]) / n)
                drafts[name][0] += after[1] - before[1]
                drafts[name][1] += after[2] - before[2]
                texts.setdefault(i, []).append(reply["choices"][0]["text"])
        same = all(len(set(t)) == 1 for t in texts.values())
        load = os.getloadavg()
        print(f"schema {args.schema}, temperature {args.temperature}, {args.nodes} expert nodes, "
              f"{args.pairs} interleaved pairs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        print(f"same text with and without grammar drafts: {'yes' if same else 'NO'} "
              f"(e.g. {texts[0][0][:72]}...)")
        for name in names:
            line = (f"{name}: {spread(rates[name], ' tok/s')}; serve CPU per token "
                    f"{spread(cpu[name], ' ms', 2)}")
            if args.nodes > 0:
                line += f"; round trips per token {spread(trips[name], '', 1)}"
            line += f"; drafts accepted {drafts[name][0]:.0f}, rejected {drafts[name][1]:.0f}"
            print(line)
        ratio = statistics.median(rates[names[0]]) / statistics.median(rates[names[1]])
        pair_ratios = [a / b for a, b in zip(rates[names[0]], rates[names[1]])]
        print(f"speed-up {ratio:.2f}x (target >= 1.3); per pair {spread(pair_ratios, 'x', 2)}")
        if not same:
            raise SystemExit("the texts differ")
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinator", default="build/coordinator/colibri-coordinator")
    parser.add_argument("--model", default="/work/shared/fixtures/models/qwen3moe-tiny-f32.gguf")
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compare-drafts", action="store_true")
    parser.add_argument("--schema", choices=["strings", "records"], default="strings")
    parser.add_argument("--items", type=int, default=6)
    parser.add_argument("--nodes", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=400)
    args = parser.parse_args()
    if args.compare_drafts:
        compare_drafts(args)
        return
    serve = subprocess.Popen(
        [args.coordinator, "serve", "--model", args.model, "--listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--threads", str(args.threads)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        addr = None
        for line in serve.stdout:
            m = re.match(r"http listening on (.*)", line)
            if m:
                addr = m.group(1)
                break
        if addr is None:
            raise SystemExit("serve did not start")

        def post(body):
            req = urllib.request.Request(f"http://{addr}/v1/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            start = time.perf_counter()
            reply = json.load(urllib.request.urlopen(req))
            return reply["usage"]["completion_tokens"], time.perf_counter() - start

        base = {"prompt": "The small birds of the valley", "temperature": 1.0, "max_tokens": 400}
        constrained = {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}
        n, seconds = post({**base, "seed": 0, **constrained})
        print(f"first constrained request: {seconds * 1000:.0f} ms ({n} tokens)")
        rates = {"json_schema": [], "free": []}
        for i in range(args.pairs):
            n, seconds = post({**base, "seed": i + 1, **constrained})
            rates["json_schema"].append(n / seconds)
            m, seconds = post({**base, "seed": i + 1, "max_tokens": n, "ignore_eos": True})
            rates["free"].append(m / seconds)
        for kind, values in rates.items():
            print(f"{kind}: median {statistics.median(values):.0f} tok/s, "
                  f"range {min(values):.0f}-{max(values):.0f} ({args.pairs} pairs, interleaved)")
    finally:
        serve.terminate()
        serve.wait()


if __name__ == "__main__":
    main()
