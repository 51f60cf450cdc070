"""Running drtp on a cluster: Slurm jobs (:mod:`.slurm`, :mod:`.submission`) and SSH deployment (:mod:`.deploy`)."""
