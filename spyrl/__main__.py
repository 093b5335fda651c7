import sys

from spyrl.cli import main

sys.exit(main())
