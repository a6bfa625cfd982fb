"""`python -m reconciler` is `ray-vast`."""

from reconciler.cli import main

main()
