"""The one exception type for problems a user can fix (bad prompt, bad checkpoint, bad option).

The CLI prints its message and exits with status 2; the UI shows it as an error box.
Anything else that escapes is a bug.
"""


class GlassboxError(Exception):
    pass
