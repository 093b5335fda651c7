import sys

from spyrl.commands import main

sys.exit(main())
