"""`python -m layoutalg.cli`: the `layoutalg` command line."""
import sys

from .app import main

sys.exit(main())
