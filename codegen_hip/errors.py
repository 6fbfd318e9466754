"""The HIP backend's one error: what ``export`` and ``check`` raise for a request they
cannot carry out. It lives below both (``check`` reads sidecars written by ``export``, and
``export`` verifies pins through ``pins``, which compiles with ``check``), so the three
modules stay layered: ``check`` <- ``pins`` <- ``export``."""


class ExportError(Exception):
    """An export that cannot be done as asked; the message is one line saying why."""
