"""Workload characterization, result statistics and plots (``drtp.analysis``).

- :mod:`.trace_frame` — a trace as a pandas frame, a view of its columns (:mod:`drtp.trace.columns`);
- :mod:`.characterize` — the workload measures of the IBM registry study (Anwar et al., FAST '18) from those
  columns, with the counters ``drtp inspect`` prints (drtp.trace.summary);
- :mod:`.trace_figures` / :mod:`.trace_analysis` — its figures and the ``drtp analyze trace`` command;
- :mod:`.results` / :mod:`.results_figures` / :mod:`.results_analysis` — replay runs and ``drtp analyze results``;
- :mod:`.views` / :mod:`.views_figures` — the studies' views of runs (latency by size, image pulls/pushes, bars);
- :mod:`.plotting`, :mod:`.report` — shared figure style and the self-contained ``report.html``;
- :mod:`.cli` — the ``analyze`` subcommands.
"""
