"""``python -m gpuagent``: see :mod:`gpuagent.cli`."""

import sys

from gpuagent.cli import main

sys.exit(main())
