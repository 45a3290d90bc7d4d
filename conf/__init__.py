"""cutlab's Hydra config tree (installed as the package cutlab.conf; Hydra reads it as pkg://cutlab.conf)."""
