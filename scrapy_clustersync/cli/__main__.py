"""``python -m scrapy_clustersync.cli``: the ``clustersync`` command."""

from __future__ import annotations

import sys

from .app import main

sys.exit(main())
