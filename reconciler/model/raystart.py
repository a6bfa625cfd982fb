"""Ray settings of every node ray-vast starts, the head and each worker (issue 24).

A raylet connects to its own object store as soon as it started it, and when the store's socket
is not there yet it tries again only after `raylet_client_connect_timeout_milliseconds` (Ray
2.60: 1000 ms, 10 attempts). About one start in two missed it on this machine, so the head's
raylet, and then each worker's, registered a whole second later (`bench/up_start.py`: the first
worker at 4.6-5.0 s or at 6.5-6.8 s). Tries every 100 ms, 100 of them: the same 10 s Ray allows
in all, found within a tenth of a second. Both are Ray's own settings (`RAY_<name>` in the
environment of `ray start`, which its raylet and workers inherit).
"""

from __future__ import annotations

RAY_NODE_ENV = {
    "RAY_raylet_client_connect_timeout_milliseconds": "100",
    "RAY_raylet_client_num_connect_attempts": "100",
}
