"""The sbatch templates drtp renders from the ``slurm:`` config section (installed as ``drtp.slurm``).

``clients.sbatch`` starts one ``drtp client`` per task of the client job; ``master.sbatch`` waits for
them, then runs ``drtp warmup`` and ``drtp run``.  ``{{ name }}`` placeholders are filled by
:mod:`drtp.cluster.slurm`; everything else is plain bash.
"""
