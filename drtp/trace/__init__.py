"""Traces: the stage before any replay or simulation.

Reading trace files of every format into :class:`~drtp.trace.records.TraceRecord`
(:mod:`.reader`), the trace as columns that simulation and analysis compute on
(:mod:`.columns`) and its Parquet cache (:mod:`.parquet`), the counters ``drtp inspect``
prints (:mod:`.summary`), turning a registry's
own log into a trace (:mod:`.capture`), and making traces: cutting a sample
(:mod:`.sample`) or generating one from a workload profile (:mod:`.generate`,
:mod:`.profiles`).
"""
