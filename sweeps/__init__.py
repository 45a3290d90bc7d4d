"""Sweep files, chosen with --config-name NAME (installed as cutlab.sweeps; on Hydra's search path through
cutlab/config/searchpath.py)."""
