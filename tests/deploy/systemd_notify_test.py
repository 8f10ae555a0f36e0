#!/usr/bin/env python3
"""The Type=notify path of deploy/systemd with the real binaries: each is
started with NOTIFY_SOCKET naming a datagram socket this test reads, as
systemd does. READY=1 must come only once the server serves (the node: its
store open, "listening on" printed; the coordinator: the model loaded and
its node reached, "listening on" printed), and STOPPING=1 on SIGTERM. A
coordinator whose only node never answers must not report READY=1.

Usage: systemd_notify_test.py BUILD_DIR FIXTURES_DIR. Exit 77: skipped.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

build, fixtures = sys.argv[1], os.environ.get("COLIBRI_FIXTURES_DIR", sys.argv[2])
model = os.path.join(fixtures, "models", "qwen3moe-tiny-f32.gguf")
if not os.path.exists(model):
    print(f"SKIP: fixture {model} not found")
    sys.exit(77)
node_bin = os.path.join(build, "expert_node", "colibri-expert-node")
coord_bin = os.path.join(build, "coordinator", "colibri-coordinator")
failures = 0


def fail(what):
    global failures
    failures += 1
    print(f"FAIL: {what}")


class Service:
    """A process started as systemd starts a Type=notify service."""

    def __init__(self, tmp, name, argv):
        self.sock_path = os.path.join(tmp, f"{name}.notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.sock_path)
        self.log_path = os.path.join(tmp, f"{name}.log")
        self.log = open(self.log_path, "w")
        env = dict(os.environ, NOTIFY_SOCKET=self.sock_path)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def receive(self, seconds):
        """The next notification, or None after `seconds` or once the process exited."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            self.sock.settimeout(0.2)
            try:
                return self.sock.recv(4096).decode()
            except socket.timeout:
                if self.proc.poll() is not None:
                    return None
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.sock.close()


with tempfile.TemporaryDirectory() as tmp:
    node = Service(tmp, "node", [node_bin, "--listen", "127.0.0.1:0",
                                 "--data-dir", os.path.join(tmp, "store")])
    ready = node.receive(30)
    if ready is None or not ready.startswith("READY=1\nSTATUS=serving on 127.0.0.1:"):
        fail(f"node: no READY=1 ({ready!r}):\n{node.output()}")
    elif "listening on" not in node.output():
        fail("node: READY=1 before it printed 'listening on'")
    else:
        print(f"ok: node {ready!r}")
    address = node.output().split("listening on ", 1)[-1].split()[0]

    coord = Service(tmp, "coordinator", [coord_bin, "serve", "-m", model, "--listen",
                                         "127.0.0.1:0", "--nodes", address, "--sessions", "1"])
    ready = coord.receive(60)
    if ready is None or not ready.startswith("READY=1\nSTATUS=serving on 127.0.0.1:"):
        fail(f"coordinator: no READY=1 ({ready!r}):\n{coord.output()}")
    elif "with 1 expert nodes" not in ready or "\nlistening on" not in "\n" + coord.output():
        fail(f"coordinator: READY=1 before serving with its node: {ready!r}\n{coord.output()}")
    else:
        print(f"ok: coordinator {ready!r}")
    for name, service in (("coordinator", coord), ("node", node)):
        service.proc.send_signal(signal.SIGTERM)
        stopping = service.receive(30)
        if stopping != "STOPPING=1\nSTATUS=shutting down":
            fail(f"{name}: no STOPPING=1 on SIGTERM ({stopping!r})")
        if service.proc.wait(30) != 0:
            fail(f"{name}: exit code {service.proc.returncode}:\n{service.output()}")
        service.stop()

    # Its only node does not answer: never ready.
    lonely = Service(tmp, "lonely", [coord_bin, "serve", "-m", model, "--listen", "127.0.0.1:0",
                                     "--nodes", "127.0.0.1:1"])
    ready = lonely.receive(30)
    if ready is not None and ready.startswith("READY=1"):
        fail(f"coordinator without a reachable node reported {ready!r}")
    else:
        print("ok: no READY=1 without a reachable node")
    lonely.stop()

print(f"{failures} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
