"""``python -m picocontext.build`` runs ``pcx build``."""

import sys

from picocontext.build.cli import main

sys.exit(main())
