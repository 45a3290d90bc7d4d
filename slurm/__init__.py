"""SLURM profiles (launcher.profile=NAME; installed as cutlab.slurm) and a one-machine SLURM cluster for trying them
(single_node.py)."""
