class CutlabError(Exception):
    """A problem with the user's input or environment; the message names the problem and the fix."""


class NonFiniteLoss(CutlabError):
    """A loss became NaN or infinite, in training or on held-out data: the parameters diverged."""


class OutOfMemory(CutlabError):
    """An allocation failed as the run trained or evaluated: the message names the settings to lower."""
