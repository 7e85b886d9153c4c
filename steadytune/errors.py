"""Errors that reach the user as one clear line and a non-zero exit (no traceback)."""


class UserError(Exception):
    """Bad input or an impossible request; the message names the file, line or key at fault."""

    exit_code = 1


class DataError(UserError):
    """A dataset file or row is unusable."""


class CheckpointError(UserError):
    """A checkpoint folder is truncated, corrupt, or belongs to another model."""
