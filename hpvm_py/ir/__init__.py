"""The IR: DFG (graphs, nodes, edges, binds) and kernel IR (leaf bodies), verifier, text form."""
