"""Build-time autotuning: strategies, the GPU worker, the tuning database, decisions."""
