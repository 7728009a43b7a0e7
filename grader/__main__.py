"""``python -m grader`` is the ``grader`` console script."""

import sys

from grader.cli import main

sys.exit(main())
