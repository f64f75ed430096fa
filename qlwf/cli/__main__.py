"""`python -m qlwf.cli`: the same command line as the `qlwf` script."""

import sys

from qlwf.cli.entry import main

sys.exit(main())
