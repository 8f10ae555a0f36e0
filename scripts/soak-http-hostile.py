#!/usr/bin/env python3
"""Hostile HTTP clients for scripts/soak.sh, run alongside its load.

  scripts/soak-http-hostile.py HOST:PORT SECONDS [--slow N]

For SECONDS, against serve's HTTP API at HOST:PORT:
  - N connections (default 10) that send a request header one byte every 2 s
    (reopened when the server ends them: it must, with 408, at its request
    deadline);
  - one at a time, bodies built to cost the server time or memory: an object
    of 200,000 keys, a chat of 200,000 messages, a chat of 5,000 messages and
    a prompt of 7 MiB, each of which must be refused with 400;
  - GET /health every second, which must answer 200 within 10 s throughout.
Prints what each did; exits 1 when /health failed or a body was not refused.
"""
import http.client
import json
import socket
import sys
import threading
import time


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    host, port = sys.argv[1].rsplit(":", 1)
    port = int(port)
    seconds = float(sys.argv[2])
    slow = int(sys.argv[sys.argv.index("--slow") + 1]) if "--slow" in sys.argv else 10
    end = time.monotonic() + seconds
    lock = threading.Lock()
    counts = {}

    def count(key):
        with lock:
            counts[key] = counts.get(key, 0) + 1

    def slow_connection():
        head = b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nX-Slow: "
        while time.monotonic() < end:
            try:
                s = socket.create_connection((host, port), timeout=5)
            except OSError:
                count("slow: connect failed")
                time.sleep(1)
                continue
            count("slow: opened")
            s.settimeout(0.1)
            sent = 0
            reply = b""
            while time.monotonic() < end:
                try:
                    s.send(head[sent:sent + 1] if sent < len(head) else b"a")
                    sent += 1
                except OSError:
                    break
                try:
                    data = s.recv(4096)
                    if not data:
                        break
                    reply += data
                except socket.timeout:
                    pass
                except OSError:
                    break
                time.sleep(2)
            if reply.startswith(b"HTTP/1.1 408"):
                count("slow: ended by the server with 408")
            elif time.monotonic() < end:
                count("slow: ended otherwise")
            s.close()

    def post(path, body, timeout=60):
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            return response.status
        except OSError:
            return 0
        finally:
            conn.close()

    def bodies():
        keys = "{" + ",".join('"%d":1' % i for i in range(200000)) + "}"
        message = '{"role":"user","content":"x"}'
        cases = [
            ("many keys", "/v1/completions",
             '{"prompt":"hi","max_tokens":1,"logit_bias":' + keys + "}"),
            ("200000 messages", "/v1/chat/completions",
             '{"max_tokens":1,"messages":[' + ",".join([message] * 200000) + "]}"),
            ("5000 messages", "/v1/chat/completions",
             '{"max_tokens":1,"messages":[' + ",".join([message] * 5000) + "]}"),
            ("7 MiB prompt", "/v1/completions",
             json.dumps({"max_tokens": 1, "prompt": "a" * (7 << 20)})),
        ]
        while time.monotonic() < end:
            for name, path, body in cases:
                if time.monotonic() >= end:
                    break
                count("body %s: %d" % (name, post(path, body.encode())))
                time.sleep(1)

    def health():
        while time.monotonic() < end:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            try:
                conn.request("GET", "/health")
                status = conn.getresponse().status
            except OSError:
                status = 0
            finally:
                conn.close()
            count("health: %s" % ("ok" if status == 200 else "failed (%d)" % status))
            time.sleep(1)

    threads = [threading.Thread(target=slow_connection) for _ in range(slow)]
    threads += [threading.Thread(target=bodies), threading.Thread(target=health)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key in sorted(counts):
        print("  %-45s %d" % (key, counts[key]))
    bad = [k for k in counts if k.startswith("health: failed") or
           (k.startswith("body ") and not k.endswith(": 400"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
