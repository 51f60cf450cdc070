"""Offline simulation plugins: cache and prefetch policies fed by the trace."""
