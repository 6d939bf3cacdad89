import sys

from watcher.cli import main

sys.exit(main())
