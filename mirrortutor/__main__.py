"""``python -m mirrortutor record train.py``: see :mod:`mirrortutor.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
