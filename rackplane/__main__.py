"""`python -m rackplane` is `rackplane`."""

from rackplane.cli import main

main()
