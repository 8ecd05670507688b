"""The exit codes of every ``tideway`` command: one table, so scripts can tell cases apart.

======  ===========  ==========================================================================
code    name         meaning
======  ===========  ==========================================================================
0       ``OK``       the command did what was asked (including "there was nothing to do")
1       ``ERROR``    it could not: a Tideway error — bad input, a refused file, an unknown id,
                     a service that does not answer — printed as one line ending in its code
2       ``USAGE``    the command line is wrong (unknown option, missing argument). This is
                     click's own code; Tideway never exits 2 for anything else
3       ``FAILED``   the command ran and what it reports is a failure: ``sessions upload
                     --wait`` on a run that ended ``failed`` or ``cancelled``; ``sessions
                     upload`` over a daily quota; ``sessions dlq redrive`` with an id that
                     is not a dead letter; ``schema test`` with a payload the pipeline
                     would not process; ``dlq redrive`` when a redrive failed or none of the
                     dead letters could be redriven; ``dlq resolve`` when a named id is not
                     an open dead letter; ``demo`` when an envelope is unaccounted for
130     —            interrupted by Ctrl-C before it finished (the shell's convention)
======  ===========  ==========================================================================
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes (see the module docstring for when each is used)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    FAILED = 3
