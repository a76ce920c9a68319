"""What the rest of Switchyard may ask of a legacy source, in neutral records only."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

from readers.records import ContentDigest, LegacyBusiness, LegacyDefinition, LegacyExecution, SourceSystem


class LegacyReader(Protocol):
    """One legacy scheduler's businesses, definitions and execution log.

    Readers never reject a row: a definition that cannot be taken as it is comes back
    with `problems` (field + reason) for the migrator to quarantine. Iterators stream in
    bounded pages, so memory does not grow with the table.
    """

    system: ClassVar[SourceSystem]

    @abstractmethod
    def businesses(self) -> list[LegacyBusiness]:
        """Every business (xxl-job executor group, batch-center `bc_biz` row)."""

    @abstractmethod
    def definitions(self, biz_codes: Collection[str] | None = None) -> Iterator[LegacyDefinition]:
        """Definitions of these businesses (all when None), in source-key order."""

    @abstractmethod
    def definition(self, key: str) -> LegacyDefinition | None:
        """One definition by its source key, or None when there is no such row."""

    @abstractmethod
    def definitions_by_keys(self, keys: Collection[str]) -> dict[str, LegacyDefinition]:
        """The definitions of these source keys that exist (one read, not one per key:
        the change stream asks for every key a binlog transaction touched)."""

    @abstractmethod
    def executions(self, biz_code: str, since: datetime, until: datetime) -> Iterator[LegacyExecution]:
        """Execution attempts of one business whose time falls in [since, until) (aware
        datetimes), ordered by that time: xxl-job by `trigger_time` (it stores no fire
        time), batch center by `scheduled_time`."""


ImageDecoder = Callable[[Mapping[str, Any]], LegacyDefinition]
ImageDigester = Callable[[Mapping[str, Any]], ContentDigest | None]


@runtime_checkable
class RowImageReader(Protocol):
    """A reader that can also decode a change stream's FULL row image of its definition
    table, to the very definition a read of that row would give (readers.images)."""

    def image_decoder(self) -> ImageDecoder:
        """A decoder bound to the businesses and the table's columns as they are now (call
        again after a change to the business table). It raises readers.images.
        ImageShapeChanged for an image of other columns (DDL)."""

    def reload_schema(self) -> None:
        """Forget the inspected table shapes: the next read or decoder inspects again."""


@runtime_checkable
class ImageDigestReader(Protocol):
    """A reader that can give the content digest of a FULL row image without mapping it
    (what `LegacyDefinition.digest` would be): the change stream skips images whose digest
    the ledger already holds."""

    def image_digester(self) -> ImageDigester:
        """Bound as `RowImageReader.image_decoder` is (businesses and columns as they are
        now); None from the digester: no cheap digest for this image, map it."""
