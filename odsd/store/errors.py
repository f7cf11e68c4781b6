"""Errors the episode store raises; each names the file or setting at fault in one line."""

from __future__ import annotations

from odsd.errors import OdsdError


class StoreError(OdsdError):
    """Base of every episode-store error."""

    exit_code = 3


class StoreNotFoundError(StoreError):
    """The path holds no odsd store."""


class StoreExistsError(StoreError):
    """A store already exists where a new one was to be created."""


class FormatVersionError(StoreError):
    """The store was written by an odsd with another on-disk format version."""


class SchemaMismatchError(StoreError):
    """Episodes or an opening config do not match the store's feature schema."""


class CorruptStoreError(StoreError):
    """A committed document or chunk is damaged or missing; never silently skipped."""

    exit_code = 4


class CommitConflictError(StoreError):
    """A maintenance commit lost a race with another commit and was not published."""


class VacuumedDataError(StoreError):
    """A snapshot refers to files that vacuum already deleted."""
