"""The config tree: where it lives, its groups and resolvers, the one composer, the checks, the neutral keys.

Everything that reads ``conf/`` (the command line, the sweep plan, the search, the benchmarks) reads it here.
"""
