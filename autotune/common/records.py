"""Reading a JSON document into a declared record (a pydantic model) in one step.

A file or a message read from outside is parsed once, where it is read, into its record;
whatever does not fit is one AutotuneError line naming the file and the key path
(`drafter.json: geometry.hidden: Field required`), never a pydantic traceback.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from autotune.common.errors import AutotuneError

Record = TypeVar("Record", bound=BaseModel)


def first_problem(exc: ValidationError) -> str:
    """A pydantic error's first problem as `key.path: message` (the message alone for
    one about the whole document)."""
    error = exc.errors()[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {message}" if where else message


def parse_record(model: type[Record], doc: Any, source: str) -> Record:
    """`doc` (decoded JSON) as a `model`; AutotuneError `source: key.path: message`."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise AutotuneError(f"{source}: {first_problem(exc)}") from None
