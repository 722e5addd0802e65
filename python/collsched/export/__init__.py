"""Exporters: MSCCL XML and others (being built)."""
