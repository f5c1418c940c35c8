"""python -m verify.bound: the entry point keeps its name; its code is verify.theorem.bound, and
`import verify.bound` gives that module itself (an alias, so a patch of one is a patch of the other)."""

import sys

from verify.theorem import bound

if __name__ == "__main__":
    from verify import cli

    cli.exit(bound.main())
else:
    sys.modules[__name__] = bound
