"""Trace dispatch: reads the trace and feeds client nodes (warmup, run) or plugins (simulate)."""
