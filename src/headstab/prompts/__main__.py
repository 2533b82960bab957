"""`python -m headstab.prompts import-pickle PICKLE... --out FILE.json [--force]`."""

import sys

from headstab.prompts.pickle_import import main

sys.exit(main())
