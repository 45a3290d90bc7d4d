"""``python -m cutlab``: the command line (cutlab/cli.py), through its entry point (cutlab/commands.py)."""

from cutlab.commands import cutlab

if __name__ == "__main__":
    cutlab()
