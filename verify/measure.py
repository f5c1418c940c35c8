"""verify.measure, the old name of verify.theorem.measure: importing it gives that module
itself (an alias, so a patch of one is a patch of the other)."""

import sys

from verify.theorem import measure

if __name__ != "__main__":
    sys.modules[__name__] = measure
