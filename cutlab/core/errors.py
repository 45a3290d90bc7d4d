class CutlabError(Exception):
    """A problem with the user's input or environment; the message names the problem and the fix."""


class NonFiniteLoss(CutlabError):
    """A loss became NaN or infinite, in training or on held-out data: the parameters diverged. ``layer`` and
    ``value``: which loss and what it was, where the raiser knows (a caller may word the line otherwise)."""

    def __init__(self, message: str, layer: int | None = None, value: float | None = None) -> None:
        super().__init__(message)
        self.layer, self.value = layer, value


class OutOfMemory(CutlabError):
    """An allocation failed as the run trained or evaluated: the message names the settings to lower."""


# A loss that is NaN or infinite before any training step: no parameter has moved, so the learning rates are not why
NOT_FINITE_AS_INITIALISED = ("the model's forward returns NaN or inf as initialised (or the input data hold NaNs); "
                             "check the model's forward and its initialisation")
