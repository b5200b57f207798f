"""InfiniBand and RoCE ports read from sysfs (agents/collectors/fabric.py sends them)."""
