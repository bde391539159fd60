"""Verifying: whether a spec builds (`buildable`), the float64 reference, running a diagram
against it (`run`, on random or the user's arrays: `data`), and the CI cost gate (`gate`)
that `ncdc check` runs. (The folder is not named `check`: `ncdc.check` is the function of
the Python API, and a subpackage of that name would take its place on `ncdc`.)"""
