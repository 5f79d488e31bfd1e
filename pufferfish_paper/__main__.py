import sys

from pufferfish_paper.cli import main

sys.exit(main())
