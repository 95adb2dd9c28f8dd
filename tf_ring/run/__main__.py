import sys

from tf_ring.run.launcher import main

sys.exit(main())
