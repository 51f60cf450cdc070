"""Workload characterization, result statistics and plots (``drtp.analysis``)."""
