"""verify.exact_checks, the old name of verify.theorem.exact_checks: importing it gives that module
itself (an alias, so a patch of one is a patch of the other)."""

import sys

from verify.theorem import exact_checks

if __name__ != "__main__":
    sys.modules[__name__] = exact_checks
