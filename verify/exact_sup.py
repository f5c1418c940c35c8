"""python -m verify.exact_sup: the entry point keeps its name; its code is verify.theorem.exact_sup, and
`import verify.exact_sup` gives that module itself (an alias, so a patch of one is a patch of the other)."""

import sys

from verify.theorem import exact_sup

if __name__ == "__main__":
    from verify import cli

    cli.exit(exact_sup.main())
else:
    sys.modules[__name__] = exact_sup
