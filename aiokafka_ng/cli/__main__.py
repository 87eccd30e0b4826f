"""``python -m aiokafka_ng.cli``: the same as the ``aiokafka-ng`` command."""

import sys

from aiokafka_ng.cli import main

sys.exit(main())
