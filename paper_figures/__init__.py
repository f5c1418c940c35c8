"""Scripts that regenerate the theory plots (see issue 3)."""
