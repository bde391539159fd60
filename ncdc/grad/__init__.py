"""`ncdc grad`: a diagram's training pair, derived by reverse mode over its op records.

`derive` writes the backward lines (ncdc.grad.derive, one rule per kind in
ncdc.grad.rules, written through ncdc.grad.tape); `make_pair` settles which forward
tensors the forward saves and which the backward recomputes, and writes both as ordinary
diagrams (ncdc.grad.pair).
"""
