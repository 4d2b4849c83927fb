"""`python -m layoutalg`: the same command line as `layoutalg`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
