import sys

from workbench.app import main

sys.exit(main())
