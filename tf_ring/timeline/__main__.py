import sys

from tf_ring.timeline.cli import main

sys.exit(main())
