"""python -m verify.study: the entry point of the paper's sweeps as studies.
The code is verify.studies.commands; its --help says what it does."""

from verify import cli
from verify.studies.commands import build_parser, expand, main, parse_args, run_study, work  # noqa: F401 (re-exported)

if __name__ == "__main__":
    cli.exit(main())
