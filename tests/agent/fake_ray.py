"""A stand-in for `ray` in agent tests: `fake_ray.py start --block ...`.

It records how it was started (argv, Ray's environment, the auth token file) in `ray-started.json`
in its working directory (the container's workspace), listens on its node-manager port as a raylet
would, and runs until it finds `ray-exit` (exits with the code inside) or gets SIGTERM (leaves
`ray-stopped` and exits 0).
"""

import json
import os
import signal
import socket
import sys
import time

args = sys.argv[1:]
info = {
    "argv": args,
    "pid": os.getpid(),
    "pgid": os.getpgid(0),
    "env": {k: v for k, v in os.environ.items() if k.startswith(("RAY_", "RV_", "CONTAINER_"))},
}
token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
if token_path:
    with open(token_path) as handle:
        info["token"] = handle.read()
    info["token_mode"] = os.stat(token_path).st_mode & 0o777


def on_term(signum, frame):
    open("ray-stopped", "w").close()
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
port = next(int(a.split("=", 1)[1]) for a in args if a.startswith("--node-manager-port="))
raylet = socket.socket()
raylet.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
raylet.bind(("127.0.0.1", port))
raylet.listen()
with open("ray-started.tmp", "w") as handle:
    json.dump(info, handle)
os.rename("ray-started.tmp", "ray-started.json")
while not os.path.exists("ray-exit"):
    time.sleep(0.05)
with open("ray-exit") as handle:
    sys.exit(int(handle.read().strip() or 1))
