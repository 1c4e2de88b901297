"""Coverage rows for the body language's own ops that catenc/registry.py does not declare
(primitives.toml; the registry holds the rows of its ops), read by test-runtime."""
