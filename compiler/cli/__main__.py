"""``python -m compiler.cli``: the ``wavefuse`` command."""
import sys

from compiler.cli import main

sys.exit(main())
