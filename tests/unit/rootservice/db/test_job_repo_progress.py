"""job_repo's progress statements on both databases (docs/design/migration.md): INPROGRESS jobs of
a type, their progress, and the final extra_info written before the job ends."""

from __future__ import annotations

import sqlalchemy as sa

from rootservice.db import job_repo
from rootservice.db.tables import all_rootservice_job

NOW = 1_767_225_600_000_000
RS = ("127.0.0.1", 2881)


def job(engine: sa.Engine, job_id: int) -> dict[str, object]:
    t = all_rootservice_job
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(t).where(t.c.job_id == job_id)).mappings().one())


def test_inprogress_jobs_of_a_type(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3001, NOW, RS)
        b = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3002, NOW, RS)
        job_repo.create_job(conn, "OTHER", "127.0.0.1", 3003, NOW, RS)
        job_repo.finish_jobs(conn, "DELETE_SERVER", "127.0.0.1", 3002, "CANCELED", NOW)
    with engine.connect() as conn:
        jobs = job_repo.inprogress_jobs(conn, "DELETE_SERVER")
    assert [(j.job_id, j.server) for j in jobs] == [(a, "127.0.0.1:3001")]
    assert b != a


def test_progress_is_set_only_while_the_job_runs(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3001, NOW, RS)
        assert job_repo.set_job_progress(conn, a, 40, '{"units_moved":1}', NOW + 1) == 1
    assert (job(engine, a)["progress"], job(engine, a)["extra_info"]) == (40, '{"units_moved":1}')
    with engine.begin() as conn:
        job_repo.finish_jobs(conn, "DELETE_SERVER", "127.0.0.1", 3001, "CANCELED", NOW + 2)
        assert job_repo.set_job_progress(conn, a, 50, "{}", NOW + 3) == 0
    assert job(engine, a)["progress"] == 40


def test_final_extra_info_goes_to_the_servers_running_job(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3001, NOW, RS)
        other = job_repo.create_job(conn, "DELETE_SERVER", "127.0.0.1", 3002, NOW, RS)
        n = job_repo.set_job_extra_info(conn, "DELETE_SERVER", "127.0.0.1", 3001, '{"eta":""}')
    assert n == 1
    assert job(engine, a)["extra_info"] == '{"eta":""}'
    assert job(engine, other)["extra_info"] in (None, "")
