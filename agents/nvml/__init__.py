"""NVML access: one wrapper in which "not supported" is a value, and a capture-driven fake."""
