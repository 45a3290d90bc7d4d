"""``cutlab-eval``: evaluate finished runs on other data and on other gamma_test grids.

- :mod:`cutlab.transfer.runs`     the finished runs a command names (run folder, sweep folder, glob) and their final
                                  weights, loaded with ``weights_only`` (cutlab.run.checkpoints)
- :mod:`cutlab.transfer.config`   the evaluation's config: the run's own, with only the data and the evaluation
                                  settings replaced, and the checks that refuse what cannot work
- :mod:`cutlab.transfer.evaluate` every layer at every gamma_test, and the feasibility verdict, on the new data
- :mod:`cutlab.transfer.record`   the evaluation record, ``<run>/evaluations/<data>-<key>/``: never the run's own files
- :mod:`cutlab.transfer.cli`      the command line
"""
