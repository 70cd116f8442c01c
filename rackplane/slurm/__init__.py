"""`rackplane slurm`: rackplane as the placement brain of a real slurmctld (issue 18).

`objects` and `plan` are pure (no I/O, no clock); `_commands` runs Slurm's client commands;
`adapter` is the process that follows the log, reads slurmctld and acts on `plan`.
"""
