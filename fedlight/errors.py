"""The one exception type for mistakes a user can fix, and the exit codes the CLI gives."""

USER_ERROR_EXIT = 2
PREEMPTED_EXIT = 3  # checkpointed after SIGUSR1 / SIGTERM (and requeued inside SLURM)


class UserError(Exception):
    """A bad recipe, missing data, impossible partition or unusable run folder.

    The CLI prints the message as a single line (it should name the key or path and the
    fix) and exits with status 2, without a traceback.
    """


class RunStopped(UserError):
    """A run that cannot go on (too many diverged clients); its last good checkpoint is intact."""
