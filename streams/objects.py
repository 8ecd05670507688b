"""The object store: immutable artifacts and datasets under one root URI (``pyarrow.fs``).

Theory of operation
-------------------
The root comes from ``Settings.objects()``: a local directory by default, ``s3://bucket/prefix``
or ``gs://bucket/prefix`` by URI (credentials come from the usual provider chain of each
filesystem, never from Tideway's settings). Every object is written once and never changed:

- **writes go to a temporary key first** (``tmp/<uuid>``) and are then *promoted* to their
  final key. On a local filesystem promotion is one ``rename(2)``; on stores without rename
  (S3, GCS) it is copy-then-delete, and a directory is promoted file by file with its commit
  marker copied last, so a reader that sees the marker sees every file;
- **a final key is never overwritten**: promoting onto an existing key keeps what is there
  when the content hash is the same and raises :class:`ObjectConflictError` when it differs;
- **reads verify sha256**: :meth:`ObjectStore.read` hashes what it read and raises the
  non-retriable :class:`IntegrityError` (``CHECKSUM_MISMATCH``) on a mismatch.
- **removal is retention's**: :meth:`ObjectStore.remove_expired` deletes what
  ``streams.retention.batch`` found expired (a superseded run's datasets, an artifact marked
  deleted, a ``tmp/`` leftover); outside ``tmp/`` only a refused upload's artifact is removed
  otherwise (:meth:`ObjectStore.discard_artifact`), a partition archive that no
  ``retention_archives`` row records (:meth:`ObjectStore.discard_unrecorded_archive`), and a
  job's output directory that no dataset row records because its job ended without success
  (:meth:`ObjectStore.discard_unrecorded_outputs`).

Artifacts are content-addressed per tenant (:func:`artifact_key`), so uploading the same file
twice stores it once. This class is blocking because ``pyarrow.fs`` is: callers on the event
loop wrap calls in ``asyncio.to_thread``; job bodies run whole in a worker thread or process.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, BinaryIO, Final
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from streams.errors import PermanentError, TransientError

__all__ = [
    "IntegrityError",
    "ObjectConflictError",
    "ObjectMissingError",
    "ObjectStore",
    "ObjectWriter",
    "StoredObject",
    "artifact_key",
    "sha256_hex",
]

_CHUNK = 1 << 20
_EXPIRABLE = ("datasets/", "artifacts/", "tmp/")
ALL_PREFIXES: Final = ("artifacts/", "datasets/", "archive/", "tmp/")
"""Every prefix the store has: what retention (the maintenance role) may delete under."""
API_DELETES: Final = ("tmp/", "artifacts/")
"""What the HTTP API may delete: its own temporary files, and an upload's artifact that no
session was given (refused after storing). Never a dataset or an archive."""


class ObjectDeleteRefused(PermissionError):
    """A delete outside the prefixes this process may delete under: a bug, never retried."""


class IntegrityError(PermanentError):
    """Stored bytes do not hash to the sha256 recorded for them (never retried)."""

    code = "CHECKSUM_MISMATCH"


class ObjectConflictError(PermanentError):
    """An immutable key already holds different content."""

    code = "OBJECT_CONFLICT"


class ObjectMissingError(PermanentError):
    """A recorded object is not in the store (deleted or never promoted)."""

    code = "OBJECT_MISSING"


class ObjectTooLargeError(PermanentError):
    """An upload exceeded the configured size limit."""

    code = "TOO_LARGE"


@dataclass(frozen=True, kw_only=True)
class StoredObject:
    """An object at its final key: where it is, what it hashes to and how big it is."""

    key: str
    url: str
    sha256: str
    size: int
    # False when the key already held this content (content addressing: another upload, maybe
    # an accepted session, stored the same bytes first): such an object is never ours to remove.
    # Not part of equality: it describes this write, not the object.
    created: bool = field(default=True, compare=False)


def sha256_hex(data: bytes) -> str:
    """Lowercase hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def artifact_key(tenant: str, sha256: str) -> str:
    """The content address of an artifact: ``artifacts/<tenant>/<aa>/<sha256>``."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"not a lowercase sha256 hex digest: {sha256!r}")
    return f"artifacts/{tenant}/{sha256[:2]}/{sha256}"


def _storage(exc: OSError, what: str) -> TransientError:
    return TransientError(f"object store: {what}: {exc}", code="STORAGE_UNAVAILABLE")


class ObjectStore:
    """Immutable objects under one root; see the module docstring for the rules."""

    def __init__(self, root: str, *, atomic_rename: bool | None = None,
                 deletes: tuple[str, ...] = ALL_PREFIXES) -> None:
        """Open the store at ``root`` (a path or a ``file://``, ``s3://``, ``gs://`` URI).

        ``atomic_rename`` overrides the promotion strategy (tests use ``False`` on a local
        directory to exercise the copy-then-delete path object stores take). ``deletes``: the
        prefixes this process may delete under (:data:`API_DELETES` for the HTTP API, which
        may never delete a dataset or an archive; docs/security.md, "Object store").
        """
        self.deletes = deletes
        scheme = urlsplit(root).scheme
        if len(scheme) <= 1:  # a plain path (or a Windows drive letter)
            self._fs: pafs.FileSystem = pafs.LocalFileSystem()
            self._base = os.path.abspath(root).rstrip("/")
            self.root_url = "file://" + self._base
        else:
            try:
                self._fs, path = pafs.FileSystem.from_uri(root)
            except OSError as exc:
                raise _storage(exc, f"cannot open {root}") from exc
            self._base = path.rstrip("/")
            self.root_url = root.rstrip("/")
        self.atomic_rename = (
            self._fs.type_name == "local" if atomic_rename is None else atomic_rename
        )

    # -- addressing -----------------------------------------------------------------------
    def url(self, key: str) -> str:
        """The URI of ``key`` (what Postgres stores as ``storage_url``)."""
        return f"{self.root_url}/{key}"

    def key(self, url: str) -> str:
        """The key of ``url``; refuses anything outside this store's root."""
        prefix = self.root_url + "/"
        if not url.startswith(prefix) or ".." in url[len(prefix) :].split("/"):
            raise PermanentError(
                f"{url!r} is not under {self.root_url}", code="OBJECT_OUTSIDE_ROOT"
            )
        return url[len(prefix) :]

    def _path(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"not a relative object key: {key!r}")
        return f"{self._base}/{key}"

    @staticmethod
    def temp_key() -> str:
        """A fresh key under ``tmp/`` for a write that is promoted later."""
        return f"tmp/{uuid.uuid4().hex}"

    # -- queries --------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        try:
            info = self._fs.get_file_info(self._path(key))
        except OSError as exc:
            raise _storage(exc, f"stat {key}") from exc
        return bool(info.type != pafs.FileType.NotFound)

    def list(self, prefix: str) -> list[str]:
        """Keys of the files under ``prefix`` (recursive, sorted)."""
        selector = pafs.FileSelector(self._path(prefix), recursive=True, allow_not_found=True)
        try:
            infos = self._fs.get_file_info(selector)
        except OSError as exc:
            raise _storage(exc, f"list {prefix}") from exc
        base = self._base + "/"
        return sorted(i.path[len(base) :] for i in infos if i.type == pafs.FileType.File)

    def children(self, prefix: str) -> builtins.list[str]:
        """Keys of the entries (files and directories) directly under ``prefix``, sorted."""
        selector = pafs.FileSelector(self._path(prefix), recursive=False, allow_not_found=True)
        try:
            infos = self._fs.get_file_info(selector)
        except OSError as exc:
            raise _storage(exc, f"list {prefix}") from exc
        base = self._base + "/"
        return sorted(i.path[len(base) :].rstrip("/") for i in infos)

    def footprint(self, key: str) -> tuple[datetime | None, int]:
        """When the file ``key``, or the newest file under the directory ``key``, was last
        written (``None``: nothing there), and how many bytes it holds. Retention ages and
        sizes leftovers by it."""
        path = self._path(key)
        try:
            info = self._fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                return info.mtime, int(info.size or 0)
            selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
            files = [i for i in self._fs.get_file_info(selector) if i.type == pafs.FileType.File]
        except OSError as exc:
            raise _storage(exc, f"stat {key}") from exc
        times = [i.mtime for i in files if i.mtime is not None]
        return max(times, default=None), sum(int(i.size or 0) for i in files)

    # -- reads ----------------------------------------------------------------------------
    def read(self, key: str, *, sha256: str) -> bytes:
        """The bytes at ``key``, verified against ``sha256`` (raises :class:`IntegrityError`)."""
        data = self.read_unverified(key)
        actual = sha256_hex(data)
        if actual != sha256:
            raise IntegrityError(
                f"{key}: sha256 is {actual}, recorded {sha256}; the object is corrupt or replaced"
            )
        return data

    def verify(self, key: str, *, sha256: str) -> None:
        """Check the object at ``key`` against ``sha256`` without keeping its bytes (raises
        :class:`IntegrityError`, :class:`ObjectMissingError`)."""
        try:
            with self._fs.open_input_stream(self._path(key)) as stream:
                actual = hashlib.file_digest(stream, "sha256").hexdigest()
        except FileNotFoundError as exc:
            raise ObjectMissingError(f"{key} is not in the object store") from exc
        except OSError as exc:
            raise _storage(exc, f"read {key}") from exc
        if actual != sha256:
            raise IntegrityError(
                f"{key}: sha256 is {actual}, recorded {sha256}; the object is corrupt or replaced"
            )

    def local_path(self, key: str) -> str | None:
        """The file system path of ``key`` when this store is a local directory (another
        program on this machine may read it there), else ``None``."""
        return self._path(key) if self._fs.type_name == "local" else None

    def read_unverified(self, key: str) -> bytes:
        """The bytes at ``key`` without a hash check (manifests, which carry the hashes)."""
        try:
            with self._fs.open_input_stream(self._path(key)) as stream:
                return bytes(stream.read())
        except FileNotFoundError as exc:
            raise ObjectMissingError(f"{key} is not in the object store") from exc
        except OSError as exc:
            raise _storage(exc, f"read {key}") from exc

    def open_input_file(self, key: str) -> Any:
        """A random-access reader of ``key`` (a ``pyarrow`` file), unverified: for Parquet
        archives (``streams.retention.archive``), which are read a row group at a time and
        carry page checksums instead of being hashed whole on every read."""
        try:
            return self._fs.open_input_file(self._path(key))
        except FileNotFoundError as exc:
            raise ObjectMissingError(f"{key} is not in the object store") from exc
        except OSError as exc:
            raise _storage(exc, f"open {key}") from exc

    # -- writes ---------------------------------------------------------------------------
    def writer(self, *, max_bytes: int | None = None) -> ObjectWriter:
        """A streaming writer to a temporary key; :meth:`ObjectWriter.commit` promotes it."""
        return ObjectWriter(self, self.temp_key(), max_bytes=max_bytes)

    def put(self, key: str, data: bytes) -> StoredObject:
        """Store ``data`` at ``key`` once (same content again is a no-op, other content fails)."""
        w = self.writer()
        try:
            w.write(data)
        except BaseException:
            w.abort()
            raise
        return w.commit(key)

    def put_artifact(
        self, tenant: str, chunks: Iterable[bytes], *, max_bytes: int | None = None
    ) -> StoredObject:
        """Store an artifact at its content address (:func:`artifact_key`)."""
        w = self.writer(max_bytes=max_bytes)
        try:
            for chunk in chunks:
                w.write(chunk)
        except BaseException:
            w.abort()
            raise
        return w.commit(artifact_key(tenant, w.sha256))

    def write_temp(self, key: str, data: bytes) -> None:
        """Write ``data`` at the temporary ``key`` (must be under ``tmp/``)."""
        if not key.startswith("tmp/"):
            raise ValueError(f"write_temp only writes under tmp/: {key!r}")
        self._write(self._path(key), data)

    def _write(self, path: str, data: bytes) -> None:
        try:
            self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self._fs.open_output_stream(path) as out:
                out.write(data)
        except OSError as exc:
            raise _storage(exc, f"write {path}") from exc

    def promote_file(self, temp: str, final: str, *, sha256: str) -> bool:
        """Move ``temp`` to ``final``; ``False`` when ``final`` already held the same content."""
        src, dst = self._path(temp), self._path(final)
        if self.exists(final):
            self._check_same(final, sha256)
            self.delete_temp(temp)
            return False
        try:
            self._fs.create_dir(dst.rsplit("/", 1)[0], recursive=True)
            if self.atomic_rename:
                self._fs.move(src, dst)
            else:
                self._fs.copy_file(src, dst)
                self._fs.delete_file(src)
        except OSError as exc:
            raise _storage(exc, f"promote {temp} -> {final}") from exc
        return True

    def promote_dir(self, temp: str, final: str, *, marker: str, hashes: dict[str, str]) -> bool:
        """Promote the directory ``temp`` to ``final`` as a unit.

        ``hashes`` maps each file name (relative to the directory) to its sha256; ``marker`` is
        the file whose presence means "complete", copied last on stores without rename.
        Returns ``False`` when a complete ``final`` already existed (the temp copy is dropped).
        """
        if self.exists(f"{final}/{marker}"):
            self.delete_temp(temp)
            return False
        if self.atomic_rename and not self.list(final):
            try:
                self._fs.create_dir(self._path(final).rsplit("/", 1)[0], recursive=True)
                self._fs.move(self._path(temp), self._path(final))
                return True
            except OSError as exc:
                if self.exists(f"{final}/{marker}"):  # lost a race to an identical writer
                    self.delete_temp(temp)
                    return False
                raise _storage(exc, f"promote {temp} -> {final}") from exc
        for name, digest in sorted(hashes.items()):
            if name != marker:
                self.promote_file(f"{temp}/{name}", f"{final}/{name}", sha256=digest)
        self.promote_file(f"{temp}/{marker}", f"{final}/{marker}", sha256=hashes[marker])
        self.delete_temp(temp)
        return True

    def delete_temp(self, key: str) -> None:
        """Remove a temporary file or directory (only ever under ``tmp/``)."""
        if not key.startswith("tmp/"):
            raise ValueError(f"only temporary keys may be deleted: {key!r}")
        self._remove(key)

    def discard_artifact(self, key: str) -> None:
        """Remove an artifact that no session was ever given (an upload refused after storing).

        The one exception to "never deleted": the caller has checked that nothing refers to
        the object (see ``streams.sessions.upload``). Removing a missing key is a no-op.
        """
        if not key.startswith("artifacts/"):
            raise ValueError(f"not an artifact key: {key!r}")
        self._remove(key)

    def remove_expired(self, key: str) -> None:
        """Remove the file or directory ``key`` that retention has expired
        (``streams.retention.batch``): a superseded run's ``datasets/<run>``, an artifact
        marked deleted, a ``tmp/`` leftover. The other exception to "never deleted"; the
        caller has checked that nothing live refers to it. A missing key is a no-op."""
        if not key.startswith(_EXPIRABLE) or key.rstrip("/") + "/" in _EXPIRABLE:
            raise ValueError(f"not an expirable key: {key!r}")
        self._remove(key)

    def discard_unrecorded_outputs(self, key: str) -> None:
        """Remove a job's output directory ``datasets/<run>/<dir>`` that no dataset row records
        and none ever will: the attempt that promoted it belongs to a job that then ended
        without success (cancelled, failed for good). Another exception to "never deleted";
        the caller (``streams.jobs.unrecorded`` when the worker lets go of the attempt, or
        retention's sweep, ``streams.retention.unrecorded_outputs``) has checked that. A
        missing key is a no-op."""
        parts = key.split("/")
        if len(parts) != 3 or parts[0] != "datasets" or not all(parts):
            raise ValueError(f"not a job's output directory: {key!r}")
        self._remove(key)

    def discard_unrecorded_archive(self, key: str) -> None:
        """Remove a partition archive that no ``retention_archives`` row records: an export
        promoted by a drop whose transaction then failed to commit. The third exception to
        "never deleted"; the caller (``streams.retention.archive``) holds the partition and
        has checked that no row names the key. A missing key is a no-op."""
        if not key.startswith("archive/"):
            raise ValueError(f"not an archive key: {key!r}")
        self._remove(key)

    def remove_expired_archive(self, key: str) -> None:
        """Remove a partition archive past ``retention.archives_s``. The fourth exception to
        "never deleted"; the caller (``streams.retention.archive``) deletes the row recording
        it right after. A missing key is a no-op."""
        if not key.startswith("archive/") or not key.endswith(".parquet"):
            raise ValueError(f"not an archive key: {key!r}")
        self._remove(key)

    def _remove(self, key: str) -> None:
        """Delete the file or directory ``key``; a missing key is a no-op. Only the public
        methods above call it, each after checking that its kind of key may go, and only
        under a prefix this process may delete under."""
        if not key.startswith(self.deletes):
            raise ObjectDeleteRefused(
                f"this process may not delete under {key.split('/', 1)[0]}/ (only "
                f"{', '.join(self.deletes)})")
        path = self._path(key)
        try:
            info = self._fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                self._fs.delete_dir(path)
            elif info.type == pafs.FileType.File:
                self._fs.delete_file(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _storage(exc, f"delete {key}") from exc

    def _check_same(self, key: str, sha256: str) -> None:
        existing = sha256_hex(self.read_unverified(key))
        if existing != sha256:
            raise ObjectConflictError(f"{key} already holds other content ({existing} != {sha256})")

    def open_temp_output(self, key: str) -> Any:
        """An output stream at the temporary ``key`` (used by :class:`ObjectWriter`)."""
        path = self._path(key)
        try:
            self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            return self._fs.open_output_stream(path)
        except OSError as exc:
            raise _storage(exc, f"open {key}") from exc


class ObjectWriter:
    """Streams bytes to a temporary key while hashing them; commit promotes, abort deletes."""

    def __init__(self, store: ObjectStore, temp: str, *, max_bytes: int | None) -> None:
        self._store = store
        self._temp = temp
        self._max = max_bytes
        self._hash = hashlib.sha256()
        self.size = 0
        self._out: BinaryIO | None = store.open_temp_output(temp)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def write(self, chunk: bytes) -> None:
        if self._out is None:
            raise RuntimeError("writer already closed")
        self.size += len(chunk)
        if self._max is not None and self.size > self._max:
            raise ObjectTooLargeError(f"upload exceeds {self._max} bytes")
        self._hash.update(chunk)
        try:
            self._out.write(chunk)
        except OSError as exc:
            raise _storage(exc, f"write {self._temp}") from exc

    def _close(self) -> None:
        if self._out is not None:
            try:
                self._out.close()
            except OSError as exc:
                raise _storage(exc, f"close {self._temp}") from exc
            finally:
                self._out = None

    def commit(self, key: str) -> StoredObject:
        """Promote what was written to ``key`` (immutable: see :meth:`ObjectStore.promote_file`)."""
        self._close()
        digest = self.sha256
        created = self._store.promote_file(self._temp, key, sha256=digest)
        return StoredObject(
            key=key, url=self._store.url(key), sha256=digest, size=self.size, created=created
        )

    def abort(self) -> None:
        """Drop the temporary object (safe to call after a failed write)."""
        try:
            self._close()
        finally:
            self._store.delete_temp(self._temp)
