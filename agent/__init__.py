"""The worker side of ray-vast: the bootloader and the PID-1 watchdog inside a rented container.

Holds the sans-I/O state machine (`lifecycle`, with its contract in `events`, `commands` and
`state`, h11's seam), its driver (`watchdog`) and the I/O it drives: the head's protocol
(`transport`, `messages`, `identity`), Ray on the node (`raynode`, `rayversion`), samples of work
(`sampling`, `gpus_sample`, `cores`), the deliberate stop and the ending (`stopping`, `ending`),
and the `bootloader` that fetches and verifies the rest.

Imports only the standard library and itself, and runs on Python 3.9 (it runs inside the user's
image); never `reconciler` or `vastsim` (tests/layering/layers.py).
"""
