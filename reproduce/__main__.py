import sys

from reproduce.cli import main

sys.exit(main())
