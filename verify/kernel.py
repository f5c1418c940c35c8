"""python -m verify.kernel: the kernel limit of an MLP student beside SGD (verify.learning.kernel_vs_sgd)."""

from verify import cli
from verify.learning.kernel_vs_sgd import build_parser, main, parse_args, run, work  # noqa: F401 (its API, re-exported)

if __name__ == "__main__":
    cli.exit(main())
