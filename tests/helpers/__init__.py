"""Shared test code: the CLI runner, fixtures of records and tiny models. Test modules import from here, never from each other."""
