"""Planning: the kernel breaks, each kernel's candidates searched and ranked by the model,
the tuning cache (explicit beats tuned beats modelled), and the compiler's feedback."""
