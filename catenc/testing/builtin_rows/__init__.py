"""Coverage rows for the body language's own functions (primitives.toml), read by test-runtime."""
