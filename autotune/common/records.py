"""Reading a JSON document into a declared record (a pydantic model) in one step, and
the record base that writes a document back as it was read.

A file or a message read from outside is parsed once, where it is read, into its record;
whatever does not fit is one AutotuneError line naming the file and the key path
(`drafter.json: geometry.hidden: Field required`), never a pydantic traceback.
`JsonRecord` (best.json's parts, a measurement's summary, a trial's notes) keeps the keys
it was given, in their order, and numbers as written (`Number`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, TypeVar, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    model_serializer,
    model_validator,
)

from autotune.common.errors import AutotuneError

Record = TypeVar("Record", bound=BaseModel)

# A JSON number as written: an int stays an int (a `float` field would write 1 as 1.0,
# and a re-written file would differ).
Number = Union[int, float]


class JsonRecord(BaseModel):
    """A JSON document's part (of best.json, a summary, a trial's attributes): declared
    keys typed, others kept as given, written back with exactly the keys and order it
    was read with."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    # The keys as given, in order (empty: built in code, written in declared order).
    _keys: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_key_order(cls, data: Any, handler: Callable[[Any], Any]) -> Any:
        record = handler(data)
        if isinstance(data, Mapping):
            # A record built in code may name a field by its attribute (`ci90=`): the
            # key it is written under is its alias (`speedup_ci90`).
            fields = cls.model_fields
            record._keys = tuple(fields[key].alias or key if key in fields else key
                                 for key in data)
        return record

    @model_serializer(mode="wrap")
    def _in_key_order(self, handler: Callable[[Any], Any]) -> Any:
        out = handler(self)
        if not self._keys or not isinstance(out, dict):
            return out
        ordered = {key: out[key] for key in self._keys if key in out}
        ordered.update((key, value) for key, value in out.items() if key not in ordered)
        return ordered

    def to_json(self) -> Any:
        """The JSON value as autotune writes it (the keys given, in their order)."""
        return self.model_dump(mode="python", by_alias=True, exclude_unset=True)

    def extra(self, key: str) -> Any:
        """A key this part does not declare (None without it): for figures only some
        records carry."""
        return (self.model_extra or {}).get(key)


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
