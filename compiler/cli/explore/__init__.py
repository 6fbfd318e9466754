"""Exploring a model: the interactive explorer (``wavefuse explore``, a Textual app), the
self-contained HTML report (``wavefuse report``) and runs side by side (``wavefuse
compare``).

All three read one view-model, :mod:`compiler.cli.explore.session`, which calls the data
builders of :mod:`compiler.cli.views` (the ones ``wavefuse view`` prints), so a number is
computed once whichever way it is shown. Textual is an optional dependency
(``pip install 'wavefuse[explore]'``); only :mod:`compiler.cli.explore.app` imports it.
"""
