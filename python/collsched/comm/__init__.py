"""torch.distributed runtime: executes any Plan (being built)."""
