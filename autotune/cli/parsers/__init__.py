"""Each command's argument parser, one module per command (named as the command's
runner module in `autotune.cli`).

They live apart from the runners because a runner imports what its command needs
(optuna, the measuring code, sometimes torch) while `autotune --help` and an argument
error must load none of it: these modules import only torch-free tables.
"""

from __future__ import annotations

from autotune.cli.parsers import (
    export,
    generate,
    measure,
    profile,
    report,
    search,
    train,
    validate,
)
from autotune.cli.parsers.options import AddParser

# In the order `autotune --help` lists the commands.
COMMANDS: tuple[AddParser, ...] = (
    measure.add_parser, search.add_parser, generate.add_parser, export.add_parser,
    report.add_parser, profile.add_parser, train.add_parser, validate.add_parser,
)

__all__ = ["COMMANDS"]
