"""The trace formats drtp reads, by the names ``--format`` and the config take.

Apart from the readers themselves, so that the command line can offer the
names without importing the reader and what it decodes with.
"""

FORMATS: tuple[str, ...] = ("auto", "ibm", "jsonl", "registry-log", "parquet")
