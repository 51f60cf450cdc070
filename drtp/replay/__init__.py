"""The replay stage's records and numbers, shared by the master and its client nodes.

What travels master → node → master (:mod:`.messages`, signed by
:mod:`.signing`), how one request ended (:mod:`.outcome`), one line of
``requests.csv`` (:mod:`.result_row`), and the numbers of a run computed once
from its rows (:mod:`.summary`, :mod:`.failure_budget`), the layout of a run's folder
(:mod:`.run_dirs`) and the run's clock (:mod:`.run_clock`).  Dispatch lives in
``drtp.master``, execution in ``drtp.client``; neither imports the other.
"""
