"""Bayesian hyper-parameter search over cutlab's config tree with current Optuna (TPE, pruning, heartbeats).

``python -m cutlab.search search=<preset> [cutlab overrides...] [--workers N] [--n-trials N] [--dry-run]``

- :mod:`cutlab.search.preset`  reads and checks a preset (searches/*.yaml): the space, budget, storage.
- :mod:`cutlab.search.storage` opens the study storage (journal file, sqlite, PostgreSQL) with heartbeats.
- :mod:`cutlab.search.compose` composes a run's config exactly as ``python -m cutlab`` would.
- :mod:`cutlab.search.worker`  the trial loop one worker process runs.
- :mod:`cutlab.search.report`  the best trial of each arm, by validation.

Optuna is imported only here, never by a plain ``python -m cutlab`` run.
"""
