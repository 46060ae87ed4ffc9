"""``ReplicaService.FetchData`` served to an agent building a replica by copy
(observer_agent.replicas.serving): the file with its checksum, errors, chunk caps."""

from __future__ import annotations

import zlib
from pathlib import Path

from observer_agent.replicas.faults import FAULT_SERVE_DATA_ERROR_FILE
from observer_agent.replicas.serving import DATA_CHUNK_MAX
from tests.unit.observer_agent.helpers import run, wait_until
from tests.unit.observer_agent.replicas.helpers import SIZE, copy_nodes, fault, lead


def test_fetch_data_streams_the_file_with_its_checksum_and_answers_errors(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 1) as (a,):
            await lead(a)
            await wait_until(lambda: a.end_index() >= 3, "a few log entries")
            raw = (a.rdir() / "data").read_bytes()
            assert len(raw) == SIZE

            chunks = await a.fetch_data(chunk_size=100_000)
            assert [c.offset for c in chunks] == [0, 100_000, 200_000]
            assert b"".join(c.data for c in chunks) == raw
            first = chunks[0]
            assert first.error.code == 0
            assert (first.total_size, first.checksum, first.term) == (SIZE, zlib.crc32(raw), 1)
            assert first.log_start_index == 1 and first.log_end_index >= 3
            assert {c.total_size for c in chunks} == {SIZE}
            assert all(c.checksum == 0 and c.log_end_index == 0 for c in chunks[1:])

            default = await a.fetch_data()  # chunk_size 0: 256 KiB
            assert [len(c.data) for c in default] == [SIZE]

            tail = await a.fetch_data(offset=SIZE - 10)
            assert [(c.offset, c.data) for c in tail] == [(SIZE - 10, raw[-10:])]
            assert tail[0].checksum == zlib.crc32(raw) and tail[0].log_end_index >= 3
            [end] = await a.fetch_data(offset=SIZE)
            assert (end.error.code, end.offset, end.data, end.total_size) == (0, SIZE, b"", SIZE)

            for kw in ({"offset": -1}, {"offset": SIZE + 1}, {"chunk_size": -5}):
                [bad] = await a.fetch_data(**kw)
                assert bad.error.name == "OB_INVALID_ARGUMENT" and not bad.data
            [absent] = await a.fetch_data(ls=99)
            assert absent.error.name == "OB_ENTRY_NOT_EXIST" and a.addr in absent.error.message

            switch = fault(a, FAULT_SERVE_DATA_ERROR_FILE)
            [err] = await a.fetch_data()
            assert err.error.name == "OB_ERR_SYS" and FAULT_SERVE_DATA_ERROR_FILE in (
                err.error.message
            )
            switch.unlink()
            assert len(await a.fetch_data()) == 1

    run(scenario())


def test_fetch_data_caps_chunks_below_the_grpc_message_limit(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with copy_nodes(tmp_path, 1, replica_size="5M") as (a,):
            await lead(a)
            chunks = await a.fetch_data(chunk_size=64 << 20)
            assert [len(c.data) for c in chunks] == [DATA_CHUNK_MAX, (5 << 20) - DATA_CHUNK_MAX]
            raw = b"".join(c.data for c in chunks)
            assert zlib.crc32(raw) == chunks[0].checksum == a.info().data_checksum  # type: ignore[union-attr]

    run(scenario())
