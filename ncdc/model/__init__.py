"""The model: the memory graph of a diagram on a machine, the launch a family proposes
(`Candidate`), and the cost of one, level by level (docs/cost-model.md, The method in formulas).
Pure functions: no family, no backend, no I/O."""
