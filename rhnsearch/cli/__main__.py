"""`python -m rhnsearch.cli`."""

import sys

from . import main

sys.exit(main())
