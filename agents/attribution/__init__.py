"""Who runs on each GPU: NVML processes mapped to pods, Slurm jobs, containers or users."""
