"""The graph IR and its references: primitive ops, the dataflow graph, the built-in models,
and the numpy reference with its error bounds that every plan and kernel is checked against."""
