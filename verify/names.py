"""Names the verify CLIs offer, importable without torch (so `--help` answers at once)."""

# Hidden-layer shapes of an SGD student: the construction's widths, two equal layers with
# the same number of units, or widths given with --widths.
SHAPES = ("matched", "balanced", "custom")
