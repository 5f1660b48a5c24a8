"""``python -m uncurated``: the command line, also what ``torchrun -m uncurated`` starts."""

import sys

from .cli import main

sys.exit(main())
