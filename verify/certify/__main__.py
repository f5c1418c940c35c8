"""python -m verify.certify: the entry point; its code is verify.certify.command."""

from verify import cli
from verify.certify.command import main

cli.exit(main())
