"""Command-line entry points and measurement."""
