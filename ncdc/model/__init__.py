"""The model: the memory graph of a diagram on a machine, the launch a family proposes
(`Candidate`), and the cost of one, level by level (napkin-model.md, docs/cost-model.md).
Pure functions: no family, no backend, no I/O."""
