"""The thin core: models, per-layer objectives, the primal-dual loop, data, evaluation.

Plain torch/numpy only: nothing here imports hydra, wandb, optuna or submitit.
"""
