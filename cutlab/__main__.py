"""``python -m cutlab``: the command line (cutlab/cli.py)."""

from cutlab.cli import main

if __name__ == "__main__":
    main()
