"""Running drtp on a cluster: Slurm jobs (:mod:`.slurm`, :mod:`.experiment`) and SSH deployment (:mod:`.deploy`)."""
