class CutlabError(Exception):
    """A problem with the user's input or environment; the message names the problem and the fix."""
