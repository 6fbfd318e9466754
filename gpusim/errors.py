"""One exception family for kernels the machine cannot run."""


class KernelError(ValueError):
    """A kernel (or a simulation request) the modelled GPU cannot execute.

    Messages are one line: what is wrong, and how to fix it.
    """
