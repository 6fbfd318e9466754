"""wavefuse subcommands: one module per command, each with ``register(subparsers)``.

``compiler.cli`` imports every module here (except ``_private`` ones) and calls its
``register``; shared options and output helpers live in :mod:`.common`.
"""
