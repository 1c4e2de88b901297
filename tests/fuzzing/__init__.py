"""Differential fuzzing of catenc: random well-typed composites (`programs`), and a runner that
compiles them at several optimisation levels and compares every build with catenc's reference
interpreter and with each other (`run`)."""
