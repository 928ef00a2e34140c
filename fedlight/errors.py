"""The one exception type for mistakes a user can fix."""


class UserError(Exception):
    """A bad recipe, missing data, impossible partition or unusable run folder.

    The CLI prints the message as a single line (it should name the key or path and the
    fix) and exits with status 2, without a traceback.
    """


class RunStopped(UserError):
    """A run that cannot go on (too many diverged clients); its last good checkpoint is intact."""
