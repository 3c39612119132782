import sys

from emulation.cli import main

sys.exit(main())
