"""python -m verify.sgd: the entry point of SGD-trained students against the construction.
The code is verify.learning.sgd_program; its --help says what it does."""

from verify import cli
from verify.learning.sgd_program import build_parser, main, parse_args, run, work  # noqa: F401 (its API, re-exported)

if __name__ == "__main__":
    cli.exit(main())
