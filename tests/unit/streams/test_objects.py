"""The object store: immutable keys, verified reads, atomic promotion (local directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.errors import PermanentError
from streams.objects import (
    IntegrityError,
    ObjectConflictError,
    ObjectMissingError,
    ObjectStore,
    ObjectTooLargeError,
    artifact_key,
    sha256_hex,
)


@pytest.fixture(params=[True, False], ids=["rename", "copy-delete"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return ObjectStore(str(tmp_path / "objects"), atomic_rename=request.param)


def test_artifact_is_content_addressed_and_stored_once(store: ObjectStore) -> None:
    data = b"$GPRMC,hello\n" * 100
    first = store.put_artifact("acme", [data[:500], data[500:]])
    second = store.put_artifact("acme", [data])
    assert first == second
    assert first.sha256 == sha256_hex(data)
    assert first.key == artifact_key("acme", first.sha256)
    assert first.size == len(data)
    assert store.read(first.key, sha256=first.sha256) == data
    assert store.list("tmp") == []  # the second temp copy was dropped


def test_read_refuses_bytes_that_do_not_match_their_hash(
    store: ObjectStore, tmp_path: Path
) -> None:
    obj = store.put_artifact("acme", [b"original"])
    Path(tmp_path / "objects" / obj.key).write_bytes(b"tampered")
    with pytest.raises(IntegrityError) as err:
        store.read(obj.key, sha256=obj.sha256)
    assert err.value.code == "CHECKSUM_MISMATCH"
    assert isinstance(err.value, PermanentError)  # never retried


def test_an_immutable_key_is_never_overwritten(store: ObjectStore) -> None:
    store.put("reports/a.json", b"one")
    store.put("reports/a.json", b"one")  # same content: a no-op
    with pytest.raises(ObjectConflictError):
        store.put("reports/a.json", b"two")
    assert store.read("reports/a.json", sha256=sha256_hex(b"one")) == b"one"


def test_missing_object_and_size_limit(store: ObjectStore) -> None:
    with pytest.raises(ObjectMissingError):
        store.read("nothing/here", sha256="0" * 64)
    with pytest.raises(ObjectTooLargeError):
        store.put_artifact("acme", [b"x" * 10, b"y" * 10], max_bytes=15)
    assert store.list("tmp") == []  # the aborted upload left nothing behind


def test_directory_promotion_is_all_or_nothing(store: ObjectStore) -> None:
    temp = store.temp_key()
    store.write_temp(f"{temp}/a.bin", b"A")
    store.write_temp(f"{temp}/_done", b"D")
    hashes = {"a.bin": sha256_hex(b"A"), "_done": sha256_hex(b"D")}
    # Nothing is visible at the final key before promotion.
    assert store.list("out/x") == []
    assert store.promote_dir(temp, "out/x", marker="_done", hashes=hashes) is True
    assert store.list("out/x") == ["out/x/_done", "out/x/a.bin"]
    # A second writer of the same directory keeps the first copy and drops its own.
    temp2 = store.temp_key()
    store.write_temp(f"{temp2}/a.bin", b"A")
    store.write_temp(f"{temp2}/_done", b"D")
    assert store.promote_dir(temp2, "out/x", marker="_done", hashes=hashes) is False
    assert store.list("tmp") == []


def test_keys_cannot_escape_the_root(store: ObjectStore) -> None:
    with pytest.raises(ValueError):
        store.read_unverified("../etc/passwd")
    with pytest.raises(PermanentError):
        store.key("file:///etc/passwd")
    obj = store.put("a/b", b"x")
    assert store.key(obj.url) == "a/b"


def test_commit_says_whether_it_created_the_object_and_discard_removes_it(
    store: ObjectStore,
) -> None:
    first = store.put_artifact("acme", [b"one upload"])
    again = store.put_artifact("acme", [b"one upload"])
    assert first.created and not again.created  # the same content was already there
    store.discard_artifact(first.key)
    assert not store.exists(first.key)
    store.discard_artifact(first.key)  # already gone: nothing to do
    with pytest.raises(ValueError):
        store.discard_artifact("datasets/run/job/_manifest.json")  # only artifacts


def test_the_apis_store_may_not_delete_a_dataset_or_an_archive(tmp_path: Path) -> None:
    """docs/security.md, "Object store": the HTTP API opens the store with API_DELETES; a bug
    that reached a dataset's or an archive's delete is refused and the files stay."""
    from streams.objects import API_DELETES, ObjectDeleteRefused

    full = ObjectStore(str(tmp_path))
    full.put("datasets/run-1/part.parquet", b"d")
    full.put("archive/t/p.parquet", b"a")
    key = artifact_key("acme", "ab" * 32)
    full.put(key, b"x")
    api = ObjectStore(str(tmp_path), deletes=API_DELETES)
    with pytest.raises(ObjectDeleteRefused):
        api.remove_expired("datasets/run-1")
    with pytest.raises(ObjectDeleteRefused):
        api.remove_expired_archive("archive/t/p.parquet")
    assert full.exists("datasets/run-1/part.parquet") and full.exists("archive/t/p.parquet")
    api.discard_artifact(key)  # an upload refused after storing: the API's own to remove
    assert not full.exists(key)
    full.remove_expired("datasets/run-1")  # retention's store may
    assert not full.exists("datasets/run-1/part.parquet")


def test_only_a_jobs_output_directory_is_discarded_as_unrecorded(store: ObjectStore) -> None:
    """``discard_unrecorded_outputs`` removes ``datasets/<run>/<dir>`` and nothing wider or
    elsewhere (a whole run, an artifact, a single file deeper down)."""
    store.put("datasets/run-1/fuse-abc/fused.parquet", b"f")
    store.put("datasets/run-1/kept-def/laps.parquet", b"k")
    for wrong in ("datasets/run-1", "datasets", "artifacts/acme/ab/cd", "tmp/x/y",
                  "datasets/run-1/fuse-abc/fused.parquet", "datasets//fuse-abc"):  # fmt: skip
        with pytest.raises(ValueError):
            store.discard_unrecorded_outputs(wrong)
    store.discard_unrecorded_outputs("datasets/run-1/fuse-abc")
    store.discard_unrecorded_outputs("datasets/run-1/fuse-abc")  # gone already: a no-op
    assert store.list("datasets/run-1") == ["datasets/run-1/kept-def/laps.parquet"]
