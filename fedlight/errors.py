"""The one exception type for mistakes a user can fix, the exit codes the CLI gives, and quiet failures."""

import warnings
from contextlib import contextmanager
from typing import Iterator

USER_ERROR_EXIT = 2
PREEMPTED_EXIT = 3  # checkpointed after SIGUSR1 / SIGTERM (and requeued inside SLURM)
INTERRUPTED_EXIT = 130  # stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports an interrupted command
STOPPED_EXITS = (PREEMPTED_EXIT, INTERRUPTED_EXIT)  # a rank that stopped cleanly, its checkpoint saved


class UserError(Exception):
    """A bad recipe, missing data, impossible partition or unusable run folder.

    The CLI prints the message as a single line (it should name the key or path and the
    fix) and exits with status 2, without a traceback.
    """


class UserErrors(UserError):
    """Several user errors found at once (a sweep's tasks, each checked as ``fit`` would): the CLI
    prints one line for each ``problems`` entry, then exits with status 2."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class RunStopped(UserError):
    """A run that cannot go on (too many diverged clients); its last good checkpoint is intact."""


@contextmanager
def warnings_if_it_works() -> Iterator[None]:
    """Show the warnings raised inside the block only if it completes.

    For a library call whose failure the caller turns into a one-line ``UserError`` (a refused
    checkpoint, an unreadable dataset, an impossible device): the library's warnings about the
    same bad input would add lines before that one, and say nothing more.
    """
    with warnings.catch_warnings(record=True) as caught:
        yield
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


# what str.splitlines() breaks a line at: a message holding one would print as several lines
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def one_line(message: str) -> str:
    """``message`` with the line breaks a user's text brought in (a key, a path) escaped as ``\\n``."""
    return "".join(repr(ch)[1:-1] if ch in LINE_BREAKS else ch for ch in message)
