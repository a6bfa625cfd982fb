"""The worker side of ray-vast: bootloader and PID-1 watchdog. Standard library only."""
