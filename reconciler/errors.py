"""The application's one error root, and the tree under it.

`RayVastError` is the one exception type the CLI catches (`cli/context.py: reported`): whatever
derives from it is a failure ray-vast knows about and has explained in its message, so the person
at the terminal gets one line, `Error: ...`, and exit status 1. Everything else (a `ValueError`, a
`TypeError`, a `KeyError`) is a bug and surfaces with its traceback: a clean one-liner would hide
where it came from, and catching a builtin type by name swallows bugs together with refusals.

    RayVastError
    ├── OperationError   reconciler/operations.py   a refusal to go on, said for the person
    │   └── StalePlanError                          a saved or reviewed plan the world outgrew
    ├── StateError       reconciler/state/errors.py the recorded state and its lock (its own tree)
    ├── VastError        reconciler/vast/errors.py  anything at the vast API (its own tree)
    ├── PlanFileError    reconciler/planfile.py     a saved plan that cannot be applied
    ├── GitError         reconciler/watch/source.py git could not fetch or check out the specs
    ├── LeakRefused      reconciler/head/launcher.py a create that would carry a head secret
    └── InputError       here                       an argument or a set of specs that cannot
                                                    be used

Module-specific errors stay beside the code that raises them (their trees are drawn there); only
the root and `InputError`, which several layers raise, live here. This module imports nothing, so
every layer, the pure core included, may derive from it.
"""

from __future__ import annotations


class RayVastError(Exception):
    """A failure ray-vast knows and has put into words: the one root the CLI reports as a clean
    one-line error (exit 1, or the class's own `exit_code`). An exception outside this tree is a
    bug and keeps its traceback."""

    exit_code = 1


class InputError(RayVastError, ValueError):
    """What a person gave (an option's value, a set of specs) cannot be used; the message says
    what to give instead. Still a `ValueError`, as these were before the root existed."""
