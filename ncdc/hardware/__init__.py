"""The machine: GPU profiles (memory levels, rates, launch limits, what the GPU sustains) as
frozen values, read from sourced YAML; occupancy; what each architecture has, as data
(docs/hardware-profiles.md)."""
