"""python -m verify.sweep: the entry point keeps its name; its code is verify.theorem.sweep, and
`import verify.sweep` gives that module itself (an alias, so a patch of one is a patch of the other)."""

import sys

from verify.theorem import sweep

if __name__ == "__main__":
    from verify import cli

    cli.exit(sweep.main())
else:
    sys.modules[__name__] = sweep
