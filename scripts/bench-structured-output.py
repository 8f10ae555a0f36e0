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

Usage: scripts/bench-structured-output.py [--coordinator PATH] [--model M.gguf]
           [--pairs 9] [--threads 1]
"""
import argparse
import json
import re
import statistics
import subprocess
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 12},
                             "minItems": 40, "maxItems": 40}},
    "required": ["items"],
    "additionalProperties": False,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinator", default="build/coordinator/colibri-coordinator")
    parser.add_argument("--model", default="/work/shared/fixtures/models/qwen3moe-tiny-f32.gguf")
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
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
