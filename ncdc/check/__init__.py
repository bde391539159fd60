"""Checking: whether a spec builds, the float64 reference, running a diagram against it,
and the CI cost gate."""
