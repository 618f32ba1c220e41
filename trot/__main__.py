import sys

from trot.cli import main

sys.exit(main())
