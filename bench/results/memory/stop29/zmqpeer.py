"""What one peer costs a ROUTER socket (libzmq's session, engine buffers and pipes), as the daemon
has one per attached agent: the server's PSS before and after N DEALER peers, each sending M
2 KB messages and reading the replies (a client subprocess).

    .venv/bin/python bench/results/memory/stop29/zmqpeer.py server 800 20
"""

import subprocess
import sys
import tempfile
import time

import zmq


def status_mb(path: str, field: str) -> float:
    with open(path) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def server(n: int, m: int, endpoint: str) -> None:
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, n + 64)
    s = ctx.socket(zmq.ROUTER)
    s.bind(endpoint)
    before = status_mb("/proc/self/smaps_rollup", "Pss:")
    client = subprocess.Popen([sys.executable, __file__, "client", str(n), str(m), endpoint])
    for _ in range(n * m):
        ident, msg = s.recv_multipart()
        s.send_multipart([ident, msg[:16]])
    time.sleep(1)
    after = status_mb("/proc/self/smaps_rollup", "Pss:")
    per_peer = (after - before) * 1024 / n
    print(f"peers={n} msgs/peer={m}: PSS {before:.1f} -> {after:.1f} MB, {per_peer:.1f} KB per peer")
    client.wait()


def client(n: int, m: int, endpoint: str) -> None:
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, n + 64)
    socks = [ctx.socket(zmq.DEALER) for _ in range(n)]
    for d in socks:
        d.connect(endpoint)
    for _ in range(m):
        for d in socks:
            d.send(b"x" * 2048)
        for d in socks:
            d.recv()
    time.sleep(2)
    for d in socks:
        d.close(0)
    ctx.term()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        with tempfile.TemporaryDirectory() as d:
            server(int(sys.argv[2]), int(sys.argv[3]), f"ipc://{d}/s.sock")
    else:
        client(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
