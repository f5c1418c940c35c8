"""The theorem's bounds as formulas (`bounds`) and their symbolic derivations (`symbolic`)."""
