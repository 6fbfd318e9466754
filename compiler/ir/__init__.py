"""The graph IR and its references: primitive ops, the dataflow graph, the built-in models,
the numpy reference with its error bounds that every plan and kernel is checked against,
and the resource limits a model is checked against before anything large is allocated."""
