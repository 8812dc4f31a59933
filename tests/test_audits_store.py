import pytest
import sqlalchemy as sa

from sheetcheck.audits import AuditNotFoundError, AuditStore


@pytest.fixture
def store(tmp_path):
    return AuditStore(str(tmp_path / "audits.sqlite"))


def test_create_and_read_back(store):
    rev = store.create(photo=b"\xff\xd8jpeg", filename="anna.jpg", template="crypts-1",
                       report={"verdict": "OK", "total": {"rules": 12}}, overlay_png=b"png")
    assert rev.revision == 1 and len(rev.audit_id) == 16
    again = store.latest(rev.audit_id)
    assert again.report == {"verdict": "OK", "total": {"rules": 12}}
    assert store.photo(rev.audit_id) == b"\xff\xd8jpeg"
    assert store.overlay(rev.audit_id) == b"png"
    assert store.info(rev.audit_id)["filename"] == "anna.jpg"


def test_corrections_append_never_overwrite(store):
    first = store.create(photo=b"p", filename=None, template=None, report={"v": 1}, overlay_png=b"a")
    store.add_revision(first.audit_id, corrections={"cell.r1.c1": "red"}, report={"v": 2},
                       overlay_png=b"b")
    store.add_revision(first.audit_id, corrections={"cell.r1.c1": "blue"}, report={"v": 3},
                       overlay_png=None)
    revs = store.revisions(first.audit_id)
    assert [r.revision for r in revs] == [1, 2, 3]
    assert [r.report["v"] for r in revs] == [1, 2, 3]
    assert revs[1].corrections == {"cell.r1.c1": "red"}
    assert store.overlay(first.audit_id, 1) == b"a"
    assert store.overlay(first.audit_id, 2) == b"b"
    # the rows of revision 1 are untouched in the database itself
    with store.engine.connect() as conn:
        n = conn.execute(sa.text("select count(*) from audit_revisions")).scalar_one()
    assert n == 3


def test_unknown_audit_is_a_clear_error(store):
    with pytest.raises(AuditNotFoundError, match="no stored audit with id 'deadbeefdeadbeef'"):
        store.revisions("deadbeefdeadbeef")


def test_store_survives_reopen(tmp_path):
    path = str(tmp_path / "a.sqlite")
    rev = AuditStore(path).create(photo=b"x", filename="f", template="t", report={"k": 1},
                                  overlay_png=None)
    assert AuditStore(path).latest(rev.audit_id).report == {"k": 1}
