"""The core's defaults that the help text names, copied here so the CLI starts light.

Every command module is imported whenever `rackplane` runs, so a default shown in a command's
help is needed at start. Importing it from its home would load that home's package too:
`rackplane.sim` (numpy), `rackplane.policies` (every policy) or `rackplane.importers` (the
Slurm and Kubernetes parsers), for each command, a read of the live log included. A test
(tests/cli/test_cli_imports.py) checks that each copy equals the original.
"""

from __future__ import annotations

DEFAULT_SLICE_SIZES = (8, 9, 16, 18)
"""`rackplane.sim.DEFAULT_SLICE_SIZES`: what `capacity` compares when no sizes are given."""

PRESETS = ("naive", "tas", "tas+spares", "tas+spares+defrag", "tas+spares+defrag+ntp")
"""`rackplane.policies.PRESETS`: the policy stacks `simulate` offers."""

POD_LABEL = "network.topology.nvidia.com/leaf"
"""`rackplane.importers.POD_LABEL`: the node label `topology import` reads the pod from."""

SUPERPOD_LABEL = "network.topology.nvidia.com/spine"
"""`rackplane.importers.SUPERPOD_LABEL`: the node label naming the superpod."""
