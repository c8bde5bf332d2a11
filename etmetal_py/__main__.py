"""`python -m etmetal_py`: the etmetal command line."""

import sys

from .cli import main

sys.exit(main())
